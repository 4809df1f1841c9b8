/*
 * libfabric's answers to bad use, through the llc provider, as an
 * application sees them (one endpoint sending to itself):
 *
 *   fi_checks self N      N tagged 8-byte round trips to itself; prints
 *                         "self: N round trips in T us"
 *   fi_checks truncate    a 100-byte message into a 10-byte buffer: an
 *                         error entry FI_ETRUNC with len 10 and olen 90,
 *                         the buffer holding the first 10 bytes
 *   fi_checks noaddr      a send to an fi_addr_t not in the AV: -FI_EINVAL
 *   fi_checks busy        fi_close of a CQ and an AV bound to an open
 *                         endpoint: -FI_EBUSY; after the endpoint: 0
 *   fi_checks cancel      a posted receive cancelled: FI_ECANCELED entry
 *   fi_checks peek        FI_PEEK of nothing: FI_ENOMSG entry; of a
 *                         message: its length and tag; FI_CLAIM receives it
 *   fi_checks rma         a registration bound to the endpoint: fi_write of
 *                         100 bytes into it at offset 10 (a counter bound
 *                         with FI_WRITE counts it), fi_read of 50 back
 *   fi_checks multi       a 4 KiB buffer posted with fi_recv on a receive
 *                         context whose default op_flags are FI_MULTI_RECV
 *                         (FI_OPT_MIN_MULTI_RECV 1025): three 1 KiB
 *                         messages land at three places in it, the buffer
 *                         is released (FI_MULTI_RECV) after the third
 *   fi_checks disabled    a send and a receive on an endpoint not enabled:
 *                         -FI_EOPBADSTATE
 *   fi_checks hints       hints this provider cannot serve (FI_ATOMIC, a
 *                         message endpoint, a foreign address format):
 *                         -FI_ENODATA; NULL hints: each answer names its
 *                         source address, and its caps (RMA included)
 *                         asked for again with RMA's modes are served
 *   fi_checks serve       print "name HEX" (the endpoint's name), then make
 *                         progress until killed
 *   fi_checks orphan HEX  with that endpoint as a peer: a directed receive
 *                         from it and a 1 MiB send to it (which it never
 *                         receives), then "posted"; once the peer is killed,
 *                         both must complete with error entries within 30 s
 *
 * Prints "OK <check>" and exits 0, or says what was wrong and exits 1.
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        int rc_ = (int) (call);                                                                    \
        if (rc_ < 0) {                                                                             \
            fprintf(stderr, "%s: %d (%s)\n", #call, rc_, fi_strerror(-rc_));                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fid_cq *cq;
static struct fid_ep *ep;
static fi_addr_t self;

static struct fid_cntr *write_cntr;

enum open_kind { PLAIN, RMA, MULTI, DISABLED };

static void open_all(enum open_kind kind)
{
    int rma = kind == RMA;
    struct fi_info *hints = fi_allocinfo();
    hints->caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV;
    if (kind == MULTI) {
        hints->caps |= FI_MULTI_RECV;
        hints->rx_attr->op_flags = FI_MULTI_RECV;
    }
    if (rma) {
        hints->caps |= FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
        hints->domain_attr->mr_mode = FI_MR_ENDPOINT | FI_MR_PROV_KEY | FI_MR_LOCAL;
    }
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup("llc");
    CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
    fi_freeinfo(hints);
    CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
    CHECK(fi_domain(fabric, info, &domain, NULL));
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    CHECK(fi_av_open(domain, &av_attr, &av, NULL));
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED};
    CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
    CHECK(fi_endpoint(domain, info, &ep, NULL));
    CHECK(fi_ep_bind(ep, &av->fid, 0));
    CHECK(fi_ep_bind(ep, &cq->fid, FI_SEND | FI_RECV));
    if (rma) {
        struct fi_cntr_attr cntr_attr = {.events = FI_CNTR_EVENTS_COMP};
        CHECK(fi_cntr_open(domain, &cntr_attr, &write_cntr, NULL));
        CHECK(fi_ep_bind(ep, &write_cntr->fid, FI_WRITE));
    }
    if (kind == DISABLED) {
        return;
    }
    CHECK(fi_enable(ep));
    char name[64];
    size_t len = sizeof name;
    CHECK(fi_getname(&ep->fid, name, &len));
    EXPECT(fi_av_insert(av, name, 1, &self, 0, NULL) == 1, "fi_av_insert of its own name");
}

/* Wait (at most 10 s) for one entry; returns 1 for a completion, 0 for an
 * error entry (in *err). */
static int wait_one(struct fi_cq_tagged_entry *e, struct fi_cq_err_entry *err)
{
    time_t start = time(NULL);
    for (;;) {
        ssize_t n = fi_cq_read(cq, e, 1);
        if (n == 1) {
            return 1;
        }
        if (n == -FI_EAVAIL) {
            memset(err, 0, sizeof *err);
            EXPECT(fi_cq_readerr(cq, err, 0) == 1, "fi_cq_readerr");
            return 0;
        }
        EXPECT(n == -FI_EAGAIN, "fi_cq_read: %zd", n);
        EXPECT(time(NULL) - start < 10, "no completion within 10 s");
    }
}

static void self_round_trips(int n)
{
    char out[8] = "ping1234", in[8];
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < n; i++) {
        CHECK(fi_trecv(ep, in, sizeof in, NULL, self, 7, 0, in));
        CHECK(fi_tsend(ep, out, sizeof out, NULL, self, 7, out));
        int got = 0;
        while (got < 2) {
            EXPECT(wait_one(&e, &err), "error entry %d", err.err);
            got++;
        }
        EXPECT(memcmp(in, out, sizeof in) == 0, "data");
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double us = (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3;
    printf("self: %d round trips in %.0f us\n", n, us);
}

static void truncate_check(void)
{
    char out[100], in[10];
    for (int i = 0; i < 100; i++) {
        out[i] = (char) i;
    }
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    CHECK(fi_trecv(ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, 9, 0, in));
    CHECK(fi_tsend(ep, out, sizeof out, NULL, self, 9, out));
    int errors = 0, done = 0;
    while (done + errors < 2) {
        if (wait_one(&e, &err)) {
            EXPECT(e.op_context == out, "unexpected completion");
            done++;
        } else {
            EXPECT(err.err == FI_ETRUNC, "error %d, not FI_ETRUNC", err.err);
            EXPECT(err.op_context == in, "context");
            EXPECT(err.len == 10 && err.olen == 90, "len %zu olen %zu", err.len, err.olen);
            EXPECT(err.tag == 9, "tag %llu", (unsigned long long) err.tag);
            errors++;
        }
    }
    EXPECT(memcmp(in, out, sizeof in) == 0, "the buffer holds the message's first bytes");
}

static void noaddr_check(void)
{
    char out[8] = {0};
    ssize_t rc = fi_tsend(ep, out, sizeof out, NULL, self + 1000, 1, NULL);
    EXPECT(rc == -FI_EINVAL, "send to an address not in the AV: %zd", rc);
}

static void busy_check(void)
{
    EXPECT(fi_close(&cq->fid) == -FI_EBUSY, "CQ closed under a bound endpoint");
    EXPECT(fi_close(&av->fid) == -FI_EBUSY, "AV closed under a bound endpoint");
    EXPECT(fi_close(&domain->fid) == -FI_EBUSY, "domain closed with children");
    CHECK(fi_close(&ep->fid));
    CHECK(fi_close(&cq->fid));
    CHECK(fi_close(&av->fid));
    CHECK(fi_close(&domain->fid));
    CHECK(fi_close(&fabric->fid));
    fi_freeinfo(info);
}

static void cancel_check(void)
{
    char in[8];
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    CHECK(fi_trecv(ep, in, sizeof in, NULL, FI_ADDR_UNSPEC, 5, 0, in));
    CHECK(fi_cancel(&ep->fid, in));
    EXPECT(!wait_one(&e, &err), "a cancelled receive completed");
    EXPECT(err.err == FI_ECANCELED && err.op_context == in, "error %d", err.err);
}

static void peek_check(void)
{
    char out[24] = "peek and claim", in[24];
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    struct fi_context ctx;
    struct iovec iov = {.iov_base = in, .iov_len = sizeof in};
    struct fi_msg_tagged msg = {
        .msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = 3, .context = &ctx};
    CHECK(fi_trecvmsg(ep, &msg, FI_PEEK));
    EXPECT(!wait_one(&e, &err) && err.err == FI_ENOMSG, "peek of nothing: %d", err.err);
    CHECK(fi_tsend(ep, out, sizeof out, NULL, self, 3, out));
    EXPECT(wait_one(&e, &err) && e.op_context == out, "send");
    for (int tries = 0;; tries++) {
        CHECK(fi_trecvmsg(ep, &msg, FI_PEEK | FI_CLAIM));
        if (wait_one(&e, &err)) {
            break;
        }
        EXPECT(err.err == FI_ENOMSG && tries < 1000, "peek: %d", err.err);
    }
    EXPECT(e.len == sizeof out && e.tag == 3, "peeked len %zu tag %llu", e.len,
           (unsigned long long) e.tag);
    CHECK(fi_trecvmsg(ep, &msg, FI_CLAIM));
    EXPECT(wait_one(&e, &err) && e.op_context == &ctx, "claimed receive");
    EXPECT(memcmp(in, out, sizeof in) == 0, "claimed data");
}

static void rma_check(void)
{
    EXPECT(info->domain_attr->mr_mode & FI_MR_ENDPOINT, "mr_mode %d", info->domain_attr->mr_mode);
    static unsigned char target[4096], src[100], back[50];
    struct fid_mr *mr;
    CHECK(fi_mr_reg(domain, target, sizeof target, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr,
                    NULL));
    CHECK(fi_mr_bind(mr, &ep->fid, 0));
    CHECK(fi_mr_enable(mr));
    uint64_t key = fi_mr_key(mr);
    EXPECT(key != FI_KEY_NOTAVAIL, "no key after fi_mr_enable");
    for (int i = 0; i < 100; i++) {
        src[i] = (unsigned char) (i + 1);
    }
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    CHECK(fi_write(ep, src, sizeof src, NULL, self, 10, key, src));
    EXPECT(wait_one(&e, &err), "fi_write: error %d", err.err);
    EXPECT(e.op_context == src && (e.flags & (FI_RMA | FI_WRITE)) == (FI_RMA | FI_WRITE),
           "write completion");
    EXPECT(memcmp(target + 10, src, sizeof src) == 0 && target[9] == 0 && target[110] == 0,
           "written bytes");
    EXPECT(fi_cntr_read(write_cntr) == 1, "write counter %llu",
           (unsigned long long) fi_cntr_read(write_cntr));
    CHECK(fi_read(ep, back, sizeof back, NULL, self, 20, key, back));
    EXPECT(wait_one(&e, &err), "fi_read: error %d", err.err);
    EXPECT(e.op_context == back, "read completion");
    EXPECT(memcmp(back, src + 10, sizeof back) == 0, "read bytes");
    /* A key nobody registered: the target refuses, an error entry. */
    CHECK(fi_read(ep, back, sizeof back, NULL, self, 0, key + 1000, back));
    EXPECT(!wait_one(&e, &err), "a read with an unknown key completed");
    CHECK(fi_close(&mr->fid));
}

static void multi_check(void)
{
    static char buf[4096];
    static char out[3][1024];
    size_t min = 1025;
    CHECK(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof min));
    CHECK(fi_recv(ep, buf, sizeof buf, NULL, FI_ADDR_UNSPEC, buf));
    for (int i = 0; i < 3; i++) {
        memset(out[i], 'a' + i, sizeof out[i]);
        CHECK(fi_send(ep, out[i], sizeof out[i], NULL, self, out[i]));
    }
    int sent = 0, received = 0, released = 0;
    char *seen[3] = {0};
    time_t start = time(NULL);
    while (sent < 3 || received < 3 || !released) {
        struct fi_cq_tagged_entry e;
        struct fi_cq_err_entry err;
        ssize_t n = fi_cq_read(cq, &e, 1);
        if (n == -FI_EAGAIN) {
            EXPECT(time(NULL) - start < 10, "%d sent, %d of 3 received, released %d, in 10 s",
                   sent, received, released);
            continue;
        }
        if (n == -FI_EAVAIL) {
            EXPECT(fi_cq_readerr(cq, &err, 0) == 1, "fi_cq_readerr");
            EXPECT(0, "error entry %d", err.err);
        }
        EXPECT(n == 1, "fi_cq_read: %zd", n);
        if (e.flags & FI_SEND) {
            sent++;
        }
        if (e.flags & FI_RECV) {
            char *p = e.buf;
            EXPECT(received < 3, "more than three messages");
            EXPECT(p >= buf && p + 1024 <= buf + sizeof buf, "a message outside the buffer");
            EXPECT(e.len == 1024, "length %zu", e.len);
            for (int i = 0; i < received; i++) {
                EXPECT(seen[i] != p, "two messages at one place");
            }
            EXPECT(p[0] >= 'a' && p[0] <= 'c' && p[1023] == p[0], "data");
            seen[received++] = p;
        }
        if (e.flags & FI_MULTI_RECV) {
            EXPECT(e.op_context == buf, "the release names the buffer's context");
            EXPECT(received == 3, "released after %d messages (room for 4, minimum 1025)",
                   received);
            released = 1;
        }
    }
}

static void disabled_check(void)
{
    char b[8] = {0};
    EXPECT(fi_tsend(ep, b, sizeof b, NULL, 0, 1, NULL) == -FI_EOPBADSTATE,
           "a send before fi_enable");
    EXPECT(fi_trecv(ep, b, sizeof b, NULL, FI_ADDR_UNSPEC, 1, 0, NULL) == -FI_EOPBADSTATE,
           "a receive before fi_enable");
}

static int ask(struct fi_info *hints, struct fi_info **out)
{
    hints->fabric_attr->prov_name = strdup("llc");
    int rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, out);
    return rc;
}

static void hints_check(void)
{
    struct fi_info *h, *got = NULL;
    h = fi_allocinfo();
    h->caps = FI_ATOMIC;
    EXPECT(ask(h, &got) == -FI_ENODATA, "FI_ATOMIC is not served");
    fi_freeinfo(h);
    h = fi_allocinfo();
    h->ep_attr->type = FI_EP_MSG;
    EXPECT(ask(h, &got) == -FI_ENODATA, "FI_EP_MSG is not served");
    fi_freeinfo(h);
    h = fi_allocinfo();
    h->addr_format = FI_SOCKADDR_IN;
    EXPECT(ask(h, &got) == -FI_ENODATA, "FI_SOCKADDR_IN is not this provider's");
    fi_freeinfo(h);
    /* NULL hints (the provider chosen by FI_PROVIDER=llc in the test). */
    CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, NULL, &got));
    for (struct fi_info *i = got; i; i = i->next) {
        EXPECT(i->src_addr && i->src_addrlen > 0, "an answer without its source address");
    }
    /* MPICH's way: the caps of the NULL-hints answer (RMA included) asked
     * for again, with the registration modes RMA needs. */
    EXPECT(got->caps & FI_RMA, "RMA in the NULL-hints answer");
    h = fi_allocinfo();
    h->caps = got->caps;
    h->mode = FI_CONTEXT;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ENDPOINT | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
    fi_freeinfo(got);
    got = NULL;
    EXPECT(ask(h, &got) == 0, "the caps of a NULL-hints answer, asked for again");
    EXPECT(got->caps & FI_RMA, "RMA served");
    fi_freeinfo(got);
    fi_freeinfo(h);
}

static void serve(void)
{
    unsigned char name[64];
    size_t len = sizeof name;
    CHECK(fi_getname(&ep->fid, name, &len));
    printf("name ");
    for (size_t i = 0; i < len; i++) {
        printf("%02x", name[i]);
    }
    printf("\n");
    fflush(stdout);
    struct fi_cq_tagged_entry e;
    for (;;) {
        (void) fi_cq_read(cq, &e, 1);
    }
}

static void orphan(const char *hex)
{
    unsigned char name[64];
    size_t len = strlen(hex) / 2;
    EXPECT(len <= sizeof name, "name too long");
    for (size_t i = 0; i < len; i++) {
        unsigned v;
        EXPECT(sscanf(hex + 2 * i, "%2x", &v) == 1, "bad hex");
        name[i] = (unsigned char) v;
    }
    fi_addr_t peer;
    EXPECT(fi_av_insert(av, name, 1, &peer, 0, NULL) == 1, "fi_av_insert of the peer");
    static char in[8], out[1 << 20];
    CHECK(fi_trecv(ep, in, sizeof in, NULL, peer, 11, 0, in));
    CHECK(fi_tsend(ep, out, sizeof out, NULL, peer, 12, out));
    printf("posted\n");
    fflush(stdout);
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    int failed = 0;
    time_t start = time(NULL);
    while (failed < 2) {
        ssize_t n = fi_cq_read(cq, &e, 1);
        EXPECT(n != 1, "an operation with the dead peer completed successfully");
        if (n == -FI_EAVAIL) {
            memset(&err, 0, sizeof err);
            EXPECT(fi_cq_readerr(cq, &err, 0) == 1, "fi_cq_readerr");
            EXPECT(err.op_context == in || err.op_context == out, "context");
            char text[256];
            printf("error %d (%s): %s\n", err.err, fi_strerror(err.err),
                   fi_cq_strerror(cq, err.prov_errno, err.err_data, text, sizeof text));
            failed++;
        }
        EXPECT(time(NULL) - start < 30, "pending operations still pending after 30 s");
    }
}

int main(int argc, char **argv)
{
    EXPECT(argc >= 2, "usage: fi_checks self N|truncate|noaddr|busy|cancel|peek");
    const char *what = argv[1];
    if (strcmp(what, "hints") == 0) {
        hints_check();
        printf("OK %s\n", what);
        return 0;
    }
    open_all(strcmp(what, "rma") == 0        ? RMA
             : strcmp(what, "multi") == 0    ? MULTI
             : strcmp(what, "disabled") == 0 ? DISABLED
                                             : PLAIN);
    if (strcmp(what, "self") == 0) {
        self_round_trips(argc > 2 ? atoi(argv[2]) : 1000);
    } else if (strcmp(what, "truncate") == 0) {
        truncate_check();
    } else if (strcmp(what, "noaddr") == 0) {
        noaddr_check();
    } else if (strcmp(what, "busy") == 0) {
        busy_check();
    } else if (strcmp(what, "cancel") == 0) {
        cancel_check();
    } else if (strcmp(what, "peek") == 0) {
        peek_check();
    } else if (strcmp(what, "rma") == 0) {
        rma_check();
    } else if (strcmp(what, "multi") == 0) {
        multi_check();
    } else if (strcmp(what, "disabled") == 0) {
        disabled_check();
    } else if (strcmp(what, "serve") == 0) {
        serve();
    } else if (strcmp(what, "orphan") == 0 && argc > 2) {
        orphan(argv[2]);
    } else {
        EXPECT(0, "unknown check %s", what);
    }
    printf("OK %s\n", what);
    return 0;
}
