/*
 * Two MPI ranks over Open MPI's OFI MTL (pml cm, mtl ofi, provider tcp):
 * a verified ping-pong from 1 B to 4 MiB, a barrier and an allreduce.
 * Rank 0 prints which libfabric its process maps (read from
 * /proc/self/maps), so the test can tell that ours carried the traffic.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int maps_ours(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096];
	int ours = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "libfabric_capi.so"))
			ours = 1;
	fclose(f);
	return ours;
}

int main(int argc, char **argv)
{
	int rank, size;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		fprintf(stderr, "needs 2 ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	const size_t max = 4u << 20;
	unsigned char *buf = malloc(max);
	for (size_t n = 1; n <= max; n *= 2) {
		unsigned char ping = (unsigned char)(n * 7 + 1), pong = (unsigned char)(n * 13 + 5);
		if (rank == 0) {
			for (size_t i = 0; i < n; i++)
				buf[i] = (unsigned char)(ping + i);
			MPI_Send(buf, (int)n, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
			MPI_Recv(buf, (int)n, MPI_BYTE, 1, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			for (size_t i = 0; i < n; i++)
				if (buf[i] != (unsigned char)(pong + i)) {
					fprintf(stderr, "size %zu: byte %zu wrong\n", n, i);
					MPI_Abort(MPI_COMM_WORLD, 3);
				}
		} else {
			MPI_Recv(buf, (int)n, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			for (size_t i = 0; i < n; i++)
				if (buf[i] != (unsigned char)(ping + i)) {
					fprintf(stderr, "size %zu: byte %zu wrong\n", n, i);
					MPI_Abort(MPI_COMM_WORLD, 3);
				}
			for (size_t i = 0; i < n; i++)
				buf[i] = (unsigned char)(pong + i);
			MPI_Send(buf, (int)n, MPI_BYTE, 0, 8, MPI_COMM_WORLD);
		}
	}
	MPI_Barrier(MPI_COMM_WORLD);
	int mine = rank + 1, sum = 0;
	MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("pingpong 1 B .. 4 MiB ok, allreduce %d, libfabric %s\n", sum,
		       maps_ours() ? "ours" : "other");
	free(buf);
	MPI_Finalize();
	return sum == 3 ? 0 : 4;
}
