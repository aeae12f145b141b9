/*
 * Four MPI ranks (or more) over Open MPI's OFI MTL: the traffic an MPI
 * program makes besides a ping-pong, each phase verified byte by byte.
 *
 *   ring      nonblocking sends and receives around the ranks, 8 in
 *             flight per size, 1 B to 1 MiB
 *   unexp     messages that arrive before their receives (eager and
 *             large), received with MPI_ANY_SOURCE in another order
 *   probe     MPI_Probe / MPI_Iprobe with MPI_ANY_SOURCE and MPI_ANY_TAG
 *             (the MTL peeks: FI_PEEK), then a receive of the size found
 *   mprobe    MPI_Mprobe / MPI_Mrecv (FI_CLAIM)
 *   ssend     synchronous sends between pairs of ranks
 *   cancel    a receive nobody sends to, cancelled
 *   coll      broadcast, alltoall, allreduce, gather
 *
 * Rank 0 prints one line per phase, then "stress ok, N ranks" and whose
 * libfabric its process maps (from /proc/self/maps).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks;

static void fail(const char *phase, const char *what, long a, long b)
{
	fprintf(stderr, "rank %d, %s: %s (%ld, %ld)\n", rank, phase, what, a, b);
	MPI_Abort(MPI_COMM_WORLD, 3);
}

/* The byte at offset i of message (src, tag, len). */
static unsigned char pat(int src, int tag, size_t len, size_t i)
{
	return (unsigned char)(src * 31 + tag * 7 + len * 3 + i * 13 + (i >> 8));
}

static void fill(unsigned char *b, int src, int tag, size_t len)
{
	for (size_t i = 0; i < len; i++)
		b[i] = pat(src, tag, len, i);
}

static void check(const char *phase, const unsigned char *b, int src, int tag, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (b[i] != pat(src, tag, len, i))
			fail(phase, "wrong byte at offset / of length", (long)i, (long)len);
}

static const char *libfabric(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096];
	const char *who = "none";
	if (!f)
		return who;
	while (fgets(line, sizeof(line), f)) {
		if (strstr(line, "libfabric_capi.so"))
			who = "ours";
		else if (strstr(line, "libfabric.so") && strcmp(who, "ours"))
			who = "debian";
	}
	fclose(f);
	return who;
}

static void say(const char *phase)
{
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("%s ok\n", phase), fflush(stdout);
}

static void ring(void)
{
	enum { DEPTH = 8 };
	const size_t sizes[] = {1, 100, 4096, 65536, 1 << 20};
	int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t len = sizes[s];
		unsigned char *tx = malloc(DEPTH * len), *rx = malloc(DEPTH * len);
		MPI_Request req[2 * DEPTH];
		for (int k = 0; k < DEPTH; k++)
			MPI_Irecv(rx + k * len, (int)len, MPI_BYTE, prev, k, MPI_COMM_WORLD, &req[k]);
		for (int k = 0; k < DEPTH; k++) {
			fill(tx + k * len, rank, k, len);
			MPI_Isend(tx + k * len, (int)len, MPI_BYTE, next, k, MPI_COMM_WORLD, &req[DEPTH + k]);
		}
		MPI_Waitall(2 * DEPTH, req, MPI_STATUSES_IGNORE);
		for (int k = 0; k < DEPTH; k++)
			check("ring", rx + k * len, prev, k, len);
		free(tx);
		free(rx);
	}
	say("ring");
}

/* Each rank but 0 sends K messages to rank 0 before rank 0 posts any
 * receive; rank 0 takes them by tag, last first, from any source. */
static void unexpected(void)
{
	enum { K = 16 };
	size_t lens[K];
	for (int k = 0; k < K; k++)
		lens[k] = k == 5 ? 256 * 1024 : (size_t)(1 + k * 517);
	if (rank != 0) {
		unsigned char *tx[K];
		MPI_Request req[K];
		for (int k = 0; k < K; k++) {
			int tag = rank * 100 + k;
			tx[k] = malloc(lens[k]);
			fill(tx[k], rank, tag, lens[k]);
			MPI_Isend(tx[k], (int)lens[k], MPI_BYTE, 0, tag, MPI_COMM_WORLD, &req[k]);
		}
		MPI_Barrier(MPI_COMM_WORLD);
		MPI_Waitall(K, req, MPI_STATUSES_IGNORE);
		for (int k = 0; k < K; k++)
			free(tx[k]);
	} else {
		MPI_Barrier(MPI_COMM_WORLD);
		unsigned char *rx = malloc(256 * 1024);
		for (int k = K - 1; k >= 0; k--)
			for (int r = nranks - 1; r >= 1; r--) {
				int tag = r * 100 + k;
				MPI_Status st;
				int count;
				MPI_Recv(rx, (int)lens[k], MPI_BYTE, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &st);
				MPI_Get_count(&st, MPI_BYTE, &count);
				if (st.MPI_SOURCE != r || st.MPI_TAG != tag || (size_t)count != lens[k])
					fail("unexp", "wrong source / length", st.MPI_SOURCE, count);
				check("unexp", rx, r, tag, lens[k]);
			}
		free(rx);
	}
	say("unexp");
}

/* Ranks but 0 send three messages of sizes rank 0 does not know; rank 0
 * finds each by probing (blocking, then polling), or by matched probes. */
static void probed(int matched)
{
	const char *phase = matched ? "mprobe" : "probe";
	enum { K = 3 };
	if (rank != 0) {
		unsigned char *tx[K];
		MPI_Request req[K];
		for (int k = 0; k < K; k++) {
			size_t len = (size_t)((rank * 7919 + k * 104729) % 70000) + 1;
			int tag = 1000 + k;
			tx[k] = malloc(len);
			fill(tx[k], rank, tag, len);
			MPI_Isend(tx[k], (int)len, MPI_BYTE, 0, tag, MPI_COMM_WORLD, &req[k]);
		}
		MPI_Waitall(K, req, MPI_STATUSES_IGNORE);
		for (int k = 0; k < K; k++)
			free(tx[k]);
	} else {
		int seen = 0, next_tag[64] = {0};
		while (seen < K * (nranks - 1)) {
			MPI_Status st;
			MPI_Message m;
			int count;
			if (matched) {
				MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &m, &st);
			} else if (seen % 2) {
				int flag = 0;
				while (!flag)
					MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
			} else {
				MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
			}
			MPI_Get_count(&st, MPI_BYTE, &count);
			int src = st.MPI_SOURCE, tag = st.MPI_TAG, k = tag - 1000;
			size_t want = (size_t)((src * 7919 + k * 104729) % 70000) + 1;
			if (src < 1 || src >= nranks || src >= 64 || k != next_tag[src] || (size_t)count != want)
				fail(phase, "probe found source / tag", src, tag);
			next_tag[src]++;
			unsigned char *rx = malloc((size_t)count);
			if (matched)
				MPI_Mrecv(rx, count, MPI_BYTE, &m, &st);
			else
				MPI_Recv(rx, count, MPI_BYTE, src, tag, MPI_COMM_WORLD, &st);
			check(phase, rx, src, tag, (size_t)count);
			free(rx);
			seen++;
		}
	}
	say(phase);
}

static void ssend(void)
{
	int peer = rank ^ 1;
	if (peer >= nranks) {
		say("ssend");
		return;
	}
	const size_t sizes[] = {8, 65536};
	unsigned char *b = malloc(65536);
	for (int s = 0; s < 2; s++)
		for (int i = 0; i < 50; i++) {
			size_t len = sizes[s];
			if ((rank & 1) == 0) {
				fill(b, rank, i, len);
				MPI_Ssend(b, (int)len, MPI_BYTE, peer, i, MPI_COMM_WORLD);
				MPI_Recv(b, (int)len, MPI_BYTE, peer, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				check("ssend", b, peer, i, len);
			} else {
				MPI_Recv(b, (int)len, MPI_BYTE, peer, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				check("ssend", b, peer, i, len);
				fill(b, rank, i, len);
				MPI_Ssend(b, (int)len, MPI_BYTE, peer, i, MPI_COMM_WORLD);
			}
		}
	free(b);
	say("ssend");
}

static void cancel(void)
{
	unsigned char b[16];
	MPI_Request req;
	MPI_Status st;
	int cancelled = 0;
	MPI_Irecv(b, sizeof(b), MPI_BYTE, MPI_ANY_SOURCE, 4242, MPI_COMM_WORLD, &req);
	MPI_Cancel(&req);
	MPI_Wait(&req, &st);
	MPI_Test_cancelled(&st, &cancelled);
	if (!cancelled)
		fail("cancel", "the receive was not cancelled", 0, 0);
	say("cancel");
}

static void collectives(void)
{
	const size_t blen = 1 << 20;
	unsigned char *b = malloc(blen);
	int root = 1 % nranks;
	if (rank == root)
		fill(b, root, 77, blen);
	MPI_Bcast(b, (int)blen, MPI_BYTE, root, MPI_COMM_WORLD);
	check("bcast", b, root, 77, blen);
	free(b);

	int *out = malloc(nranks * sizeof(int)), *in = malloc(nranks * sizeof(int));
	for (int r = 0; r < nranks; r++)
		out[r] = rank * 1000 + r;
	MPI_Alltoall(out, 1, MPI_INT, in, 1, MPI_INT, MPI_COMM_WORLD);
	for (int r = 0; r < nranks; r++)
		if (in[r] != r * 1000 + rank)
			fail("alltoall", "wrong value from rank", r, in[r]);

	const int n = 1 << 18;
	double *x = malloc(n * sizeof(double)), *sum = malloc(n * sizeof(double));
	for (int i = 0; i < n; i++)
		x[i] = rank + i * 0.5;
	MPI_Allreduce(x, sum, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	double ranks_sum = nranks * (nranks - 1) / 2.0;
	for (int i = 0; i < n; i++)
		if (sum[i] != ranks_sum + nranks * (i * 0.5))
			fail("allreduce", "wrong sum at", i, (long)sum[i]);

	int mine = rank * rank, *all = malloc(nranks * sizeof(int));
	MPI_Gather(&mine, 1, MPI_INT, all, 1, MPI_INT, 0, MPI_COMM_WORLD);
	if (rank == 0)
		for (int r = 0; r < nranks; r++)
			if (all[r] != r * r)
				fail("gather", "wrong value from rank", r, all[r]);
	free(out);
	free(in);
	free(x);
	free(sum);
	free(all);
	say("coll");
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (nranks < 2 || nranks > 64) {
		fprintf(stderr, "needs 2 to 64 ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	ring();
	unexpected();
	probed(0);
	probed(1);
	ssend();
	cancel();
	collectives();
	if (rank == 0)
		printf("stress ok, %d ranks, libfabric %s\n", nranks, libfabric());
	MPI_Finalize();
	return 0;
}
