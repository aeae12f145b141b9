//! The rest of the C interface from C: `fi_allocinfo` / `fi_dupinfo` /
//! `fi_freeinfo` ownership (whole lists, strings and addresses the
//! application put there with `malloc` / `strdup`), `fi_getinfo`'s NULL
//! `info` argument, `fi_tostr` / `fi_tostr_r`, `fi_strerror`,
//! `fi_version`, `fi_fabric`, `fi_getparams` / `fi_freeparams`. Each program
//! checks itself (a failed check prints `FAIL` and exits 2) and runs once
//! plainly and once under valgrind's leak check.

mod common;

use fabric::Registry;

const MEMORY: &str = r#"#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

static int failures;

#define CHECK(cond)                                                                     \
	do {                                                                            \
		if (!(cond)) {                                                          \
			printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);          \
			failures++;                                                     \
		}                                                                       \
	} while (0)

static int zero(const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

static void *memdup(const void *p, size_t n)
{
	void *q = malloc(n);
	if (!q)
		abort();
	memcpy(q, p, n);
	return q;
}

static void check_allocated(const struct fi_info *i)
{
	CHECK(i != NULL);
	if (!i)
		return;
	CHECK(i->tx_attr && i->rx_attr && i->ep_attr && i->domain_attr && i->fabric_attr);
	CHECK(!i->next && !i->src_addr && !i->dest_addr && !i->handle && !i->nic);
	CHECK(i->caps == 0 && i->mode == 0 && i->addr_format == 0);
	CHECK(zero(i->tx_attr, sizeof *i->tx_attr));
	CHECK(zero(i->rx_attr, sizeof *i->rx_attr));
	CHECK(zero(i->ep_attr, sizeof *i->ep_attr));
	CHECK(zero(i->domain_attr, sizeof *i->domain_attr));
	CHECK(zero(i->fabric_attr, sizeof *i->fabric_attr));
}

/* An element with everything an application may own in it. */
static struct fi_info *element(const char *prov, uint16_t port)
{
	struct fi_info *i = fi_allocinfo();
	unsigned char sin[16] = { 2, 0, (unsigned char) (port >> 8), (unsigned char) port,
				  127, 0, 0, 1 };
	i->caps = FI_MSG | FI_TAGGED;
	i->addr_format = FI_SOCKADDR_IN;
	i->src_addr = memdup(sin, sizeof sin);
	i->src_addrlen = sizeof sin;
	i->dest_addr = memdup(sin, sizeof sin);
	i->dest_addrlen = sizeof sin;
	i->ep_attr->type = FI_EP_RDM;
	i->ep_attr->auth_key = memdup("key", 3);
	i->ep_attr->auth_key_size = 3;
	i->domain_attr->name = strdup("eth0");
	i->domain_attr->auth_key = memdup("domainkey", 9);
	i->domain_attr->auth_key_size = 9;
	i->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_PROV_KEY;
	i->fabric_attr->name = strdup("192.0.2.0/24");
	i->fabric_attr->prov_name = strdup(prov);
	i->fabric_attr->prov_version = FI_VERSION(1, 2);
	return i;
}

static void allocinfo(void)
{
	struct fi_info *a = fi_allocinfo();
	struct fi_info *b = fi_dupinfo(NULL);
	check_allocated(a);
	check_allocated(b);
	CHECK(a != b && a->tx_attr != b->tx_attr);
	fi_freeinfo(a);
	fi_freeinfo(b);
	fi_freeinfo(NULL);
}

static void dupinfo_of_a_list_element(void)
{
	struct fi_info *head = element("first", 1), *second = element("second", 2),
		       *third = element("third", 3);
	head->next = second;
	second->next = third;

	struct fi_info *copy = fi_dupinfo(second);
	CHECK(copy != NULL && copy != second);
	CHECK(copy->next == NULL);
	CHECK(copy->caps == second->caps && copy->addr_format == FI_SOCKADDR_IN);
	CHECK(copy->src_addr != second->src_addr && copy->src_addrlen == 16);
	CHECK(!memcmp(copy->src_addr, second->src_addr, 16));
	CHECK(!memcmp(copy->dest_addr, second->dest_addr, 16));
	CHECK(copy->tx_attr != second->tx_attr && copy->ep_attr != second->ep_attr);
	CHECK(copy->ep_attr->type == FI_EP_RDM && copy->ep_attr->auth_key_size == 3);
	CHECK(copy->ep_attr->auth_key != second->ep_attr->auth_key);
	CHECK(!memcmp(copy->ep_attr->auth_key, "key", 3));
	CHECK(copy->domain_attr->name != second->domain_attr->name);
	CHECK(!strcmp(copy->domain_attr->name, "eth0"));
	CHECK(!memcmp(copy->domain_attr->auth_key, "domainkey", 9));
	CHECK(copy->domain_attr->mr_mode == (FI_MR_LOCAL | FI_MR_PROV_KEY));
	CHECK(!strcmp(copy->fabric_attr->prov_name, "second"));
	CHECK(!strcmp(copy->fabric_attr->name, "192.0.2.0/24"));
	CHECK(copy->fabric_attr->prov_version == FI_VERSION(1, 2));

	/* The copy is independent: the list goes first, then the copy. */
	fi_freeinfo(head);
	CHECK(!strcmp(copy->fabric_attr->prov_name, "second"));
	fi_freeinfo(copy);
}

static void dupinfo_keeps_null_substructures(void)
{
	struct fi_info *bare = calloc(1, sizeof *bare);
	bare->caps = FI_RMA;
	bare->fabric_attr = calloc(1, sizeof *bare->fabric_attr);
	bare->fabric_attr->prov_name = strdup("tcp");
	bare->src_addr = malloc(1);
	bare->src_addrlen = 0; /* a set pointer with no length is not copied */

	struct fi_info *copy = fi_dupinfo(bare);
	CHECK(copy && copy->caps == FI_RMA);
	CHECK(!copy->tx_attr && !copy->rx_attr && !copy->ep_attr && !copy->domain_attr);
	CHECK(copy->fabric_attr && !strcmp(copy->fabric_attr->prov_name, "tcp"));
	CHECK(!copy->src_addr && copy->src_addrlen == 0);
	fi_freeinfo(copy);
	fi_freeinfo(bare);
}

/* Strings an application replaced after fi_allocinfo are freed too. */
static void freeinfo_frees_application_strings(void)
{
	struct fi_info *h = fi_allocinfo();
	h->fabric_attr->prov_name = strdup("tcp");
	h->fabric_attr->prov_name[0] = 'u';
	free(h->fabric_attr->prov_name);
	h->fabric_attr->prov_name = strdup("shm");
	h->domain_attr->name = strdup("lo");
	fi_freeinfo(h);
}

static void getinfo_arguments(void)
{
	struct fi_info *hints = fi_allocinfo();
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, NULL) == -FI_EINVAL);
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, NULL, NULL) == -FI_EINVAL);
	struct fi_info *info = hints;
	CHECK(fi_getinfo(FI_VERSION(1, 18), NULL, NULL, 0, hints, &info) == -FI_ENOSYS);
	CHECK(info == NULL);
	fi_freeinfo(hints);
}

static void *other_thread(void *arg)
{
	uint64_t caps = FI_RMA;
	*(char **) arg = fi_tostr(&caps, FI_TYPE_CAPS);
	CHECK(!strcmp(*(char **) arg, "FI_RMA"));
	return NULL;
}

static void tostr(void)
{
	uint64_t caps = FI_MSG | FI_TAGGED, order = 0, mode = FI_CONTEXT;
	enum fi_ep_type ep = FI_EP_RDM;
	uint32_t fmt = FI_SOCKADDR_IN6, proto = FI_PROTO_SHM;
	enum fi_threading threading = FI_THREAD_DOMAIN;
	int mr_mode = FI_MR_LOCAL | FI_MR_ENDPOINT;
	char buf[64];

	char *s = fi_tostr(&caps, FI_TYPE_CAPS);
	CHECK(!strcmp(s, "FI_MSG, FI_TAGGED"));
	CHECK(!strcmp(fi_tostr(&ep, FI_TYPE_EP_TYPE), "FI_EP_RDM"));
	CHECK(!strcmp(fi_tostr(&fmt, FI_TYPE_ADDR_FORMAT), "FI_SOCKADDR_IN6"));
	CHECK(!strcmp(fi_tostr(&proto, FI_TYPE_PROTOCOL), "FI_PROTO_SHM"));
	CHECK(!strcmp(fi_tostr(&threading, FI_TYPE_THREADING), "FI_THREAD_DOMAIN"));
	CHECK(!strcmp(fi_tostr(&order, FI_TYPE_MSG_ORDER), ""));
	CHECK(!strcmp(fi_tostr(&mode, FI_TYPE_MODE), "FI_CONTEXT"));
	CHECK(!strcmp(fi_tostr(&mr_mode, FI_TYPE_MR_MODE), "FI_MR_LOCAL, FI_MR_ENDPOINT"));
	CHECK(!strncmp(fi_tostr("1", FI_TYPE_VERSION), "fabric-rs ", 10));
	CHECK(!strcmp(fi_tostr(&caps, 9999), "Unknown type"));
	CHECK(!strcmp(fi_tostr(&caps, FI_TYPE_ATOMIC_OP), "FI_ATOMIC_READ")); /* 0xa */
	CHECK(fi_tostr(NULL, FI_TYPE_CAPS) == NULL);
	/* One buffer per thread: the next call in this thread reuses it. */
	CHECK(fi_tostr(&caps, FI_TYPE_CAPS) == s);
	char *theirs = NULL;
	pthread_t t;
	CHECK(pthread_create(&t, NULL, other_thread, &theirs) == 0);
	pthread_join(t, NULL);
	CHECK(theirs != NULL && theirs != s);
	CHECK(!strcmp(s, "FI_MSG, FI_TAGGED"));

	struct fi_info *i = fi_allocinfo();
	i->caps = FI_MSG;
	i->ep_attr->type = FI_EP_MSG;
	i->fabric_attr->prov_name = strdup("tcp");
	s = fi_tostr(i, FI_TYPE_INFO);
	CHECK(!strncmp(s, "fi_info:\n    caps: [ FI_MSG ]\n", 29));
	CHECK(strstr(s, "        type: FI_EP_MSG\n") != NULL);
	CHECK(strstr(s, "        prov_name: tcp\n") != NULL);
	CHECK(s[strlen(s) - 1] == '\n');
	s = fi_tostr(i->ep_attr, FI_TYPE_EP_ATTR);
	CHECK(!strncmp(s, "fi_ep_attr:\n    type: FI_EP_MSG\n", 32));
	s = fi_tostr(i->fabric_attr, FI_TYPE_FABRIC_ATTR);
	CHECK(strstr(s, "    prov_name: tcp\n") != NULL);

	/* fi_tostr_r: truncated to len - 1 bytes, NUL-terminated. */
	CHECK(fi_tostr_r(buf, 8, i, FI_TYPE_INFO) == buf);
	CHECK(!strcmp(buf, "fi_info"));
	CHECK(fi_tostr_r(buf, sizeof buf, &caps, FI_TYPE_CAPS) == buf);
	CHECK(!strcmp(buf, "FI_MSG, FI_TAGGED"));
	CHECK(fi_tostr_r(NULL, 8, &caps, FI_TYPE_CAPS) == NULL);
	CHECK(fi_tostr_r(buf, 0, &caps, FI_TYPE_CAPS) == NULL);

	/* A value the library does not know is Unknown, not a crash. */
	i->ep_attr->type = (enum fi_ep_type) 77;
	CHECK(strstr(fi_tostr(i, FI_TYPE_INFO), "\n        type: Unknown\n") != NULL);
	fi_freeinfo(i);
}

static void strerror_version_fabric(void)
{
	CHECK(!strcmp(fi_strerror(FI_ENODATA), "No data available"));
	CHECK(!strcmp(fi_strerror(-FI_ENODATA), "No data available"));
	CHECK(!strcmp(fi_strerror(FI_ENOSYS), "Function not implemented"));
	CHECK(!strcmp(fi_strerror(FI_EOTHER), "Unspecified error"));
	CHECK(!strcmp(fi_strerror(FI_ETRUNC), "Truncation error"));
	CHECK(!strcmp(fi_strerror(123456), "Unknown error"));
	CHECK(fi_version() == FI_VERSION(1, 17));
	CHECK(FI_MAJOR(fi_version()) == FI_MAJOR_VERSION);

	struct fid_fabric *fabric = (struct fid_fabric *) &failures;
	struct fi_fabric_attr attr = { 0 };
	CHECK(fi_fabric(&attr, &fabric, NULL) == -FI_EINVAL);
	CHECK(fabric == NULL);
}

int main(void)
{
	allocinfo();
	dupinfo_of_a_list_element();
	dupinfo_keeps_null_substructures();
	freeinfo_frees_application_strings();
	getinfo_arguments();
	tostr();
	strerror_version_fabric();
	printf("%d failures\n", failures);
	return failures ? 2 : 0;
}
"#;

/// Lists the parameters; the test sets `FI_PROVIDER` in its environment.
const PARAMS: &str = r#"#include <stdio.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

int main(void)
{
	struct fi_param *params = NULL;
	int count = -1;
	int ret = fi_getparams(&params, &count);
	if (ret) {
		printf("FAIL fi_getparams: %d\n", ret);
		return 2;
	}
	for (int i = 0; i < count; i++)
		printf("%s|%d|%s|%s\n", params[i].name, (int) params[i].type,
		       params[i].value ? params[i].value : "(unset)",
		       params[i].help_string ? "help" : "(no help)");
	fi_freeparams(params);
	fi_freeparams(NULL);
	if (fi_getparams(NULL, &count) != -FI_EINVAL) {
		printf("FAIL NULL params\n");
		return 2;
	}
	return 0;
}
"#;

fn memory_program(test: &str, valgrind: bool) {
    let Some(stage) = common::Stage::new(test, true) else {
        return;
    };
    let exe = stage.compile("memory", MEMORY);
    let out = if valgrind {
        match stage.valgrind(test, &exe, &[], false) {
            Some(out) => out,
            None => return,
        }
    } else {
        stage.run(&exe, &[], false)
    };
    common::assert_ok("memory program", &out);
    assert_eq!(common::text(&out.stdout), "0 failures\n");
}

#[test]
fn allocinfo_dupinfo_freeinfo_tostr_strerror() {
    memory_program("memory", false);
}

#[test]
fn allocinfo_dupinfo_freeinfo_tostr_strerror_under_valgrind() {
    memory_program("memory_valgrind", true);
}

/// The expected lines: every variable of the registry, `FI_PROVIDER` with
/// the value the program gets.
fn expected_params() -> String {
    Registry::global()
        .env_vars()
        .iter()
        .map(|v| {
            let kind = match v.kind {
                "Integer" => 1,
                "Boolean" => 2,
                "size_t" => 3,
                _ => 0,
            };
            let value = if v.name == "FI_PROVIDER" {
                "tcp,shm".to_string()
            } else {
                std::env::var(v.name).unwrap_or_else(|_| "(unset)".into())
            };
            format!("{}|{kind}|{value}|help\n", v.name)
        })
        .collect()
}

fn params_program(test: &str, valgrind: bool) {
    let Some(stage) = common::Stage::new(test, true) else {
        return;
    };
    let exe = stage.compile("params", PARAMS);
    let mut cmd = if valgrind {
        let Some(c) = common::valgrind(test, &exe) else {
            return;
        };
        c
    } else {
        std::process::Command::new(&exe)
    };
    let out = cmd
        .env("FI_PROVIDER", "tcp,shm")
        .output()
        .expect("run params");
    common::assert_ok("params program", &out);
    assert_eq!(common::text(&out.stdout), expected_params());
}

#[test]
fn getparams_lists_the_registry_variables() {
    params_program("params", false);
}

#[test]
fn getparams_under_valgrind() {
    params_program("params_valgrind", true);
}
