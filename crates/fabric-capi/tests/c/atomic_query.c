/*
 * Which atomic operations a provider says it serves, asked every way
 * libfabric offers: fi_atomicvalid, fi_fetch_atomicvalid and
 * fi_compare_atomicvalid on an endpoint, and fi_query_atomic on its
 * domain (flags 0, FI_FETCH_ATOMIC, FI_COMPARE_ATOMIC), for every
 * operation and the real and integer datatypes (complex types are left
 * out: this library does not serve them), plus the refusals: unknown
 * datatype and operation, both query flags at once, FI_TAGGED.
 *
 * One line per question: the return code, and for a served one whether
 * the count is at least 1 and the size the datatype's (the counts
 * themselves are each provider's own). The test runs it on Debian's
 * libfabric and on this library, for the same provider, and compares
 * the lines.
 *
 * usage: atomic_query PROVIDER
 */
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(x)                                                                   \
	do {                                                                    \
		int _r = (int)(x);                                              \
		if (_r) {                                                       \
			fprintf(stderr, "%s: %d (%s)\n", #x, _r, fi_strerror(-_r)); \
			exit(1);                                                \
		}                                                               \
	} while (0)

static const struct {
	int dt;
	const char *name;
	size_t size;
} types[] = {
	{FI_INT8, "int8", 1},     {FI_UINT8, "uint8", 1},   {FI_INT16, "int16", 2},
	{FI_UINT16, "uint16", 2}, {FI_INT32, "int32", 4},   {FI_UINT32, "uint32", 4},
	{FI_INT64, "int64", 8},   {FI_UINT64, "uint64", 8}, {FI_FLOAT, "float", 4},
	{FI_DOUBLE, "double", 8}, {FI_LONG_DOUBLE, "long_double", sizeof(long double)},
};

static const char *ops[] = {
	"min",   "max",      "sum",      "prod",     "lor",      "land",     "bor",
	"band",  "lxor",     "bxor",     "read",     "write",    "cswap",    "cswap_ne",
	"cswap_le", "cswap_lt", "cswap_ge", "cswap_gt", "mswap",
};

static const char *form[] = {"plain", "fetch", "compare"};

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: atomic_query PROVIDER\n");
		return 2;
	}
	struct fi_info *hints = fi_allocinfo(), *info;
	hints->caps = FI_ATOMIC | FI_RMA;
	hints->ep_attr->type = FI_EP_RDM;
	hints->fabric_attr->prov_name = strdup(argv[1]);
	OK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_ep *ep;
	OK(fi_fabric(info->fabric_attr, &fabric, NULL));
	OK(fi_domain(fabric, info, &domain, NULL));
	OK(fi_endpoint(domain, info, &ep, NULL));

	const uint64_t qflags[] = {0, FI_FETCH_ATOMIC, FI_COMPARE_ATOMIC};
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
		for (int op = FI_MIN; op <= FI_MSWAP; op++)
			for (int f = 0; f < 3; f++) {
				size_t count = 0;
				int v;
				if (f == 0)
					v = fi_atomicvalid(ep, types[t].dt, op, &count);
				else if (f == 1)
					v = fi_fetch_atomicvalid(ep, types[t].dt, op, &count);
				else
					v = fi_compare_atomicvalid(ep, types[t].dt, op, &count);
				struct fi_atomic_attr attr = {0, 0};
				int q = fi_query_atomic(domain, types[t].dt, op, &attr, qflags[f]);
				printf("%s %s %s: valid %d%s, query %d%s\n", types[t].name, ops[op],
				       form[f], v, v ? "" : (count >= 1 ? " count>=1" : " count 0"), q,
				       q ? ""
					 : (attr.count >= 1 && attr.size == types[t].size ? " count>=1 size ok"
											   : " BAD attr"));
			}

	struct fi_atomic_attr attr;
	size_t count;
	printf("unknown datatype: valid %d, query %d\n", fi_atomicvalid(ep, 1000, FI_SUM, &count),
	       fi_query_atomic(domain, 1000, FI_SUM, &attr, 0));
	printf("unknown op: valid %d, query %d\n", fi_atomicvalid(ep, FI_UINT64, 1000, &count),
	       fi_query_atomic(domain, FI_UINT64, 1000, &attr, 0));
	printf("fetch and compare flags: query %d\n",
	       fi_query_atomic(domain, FI_UINT64, FI_SUM, &attr, FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC));
	OK(fi_close(&ep->fid));
	OK(fi_close(&domain->fid));
	OK(fi_close(&fabric->fid));
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return 0;
}
