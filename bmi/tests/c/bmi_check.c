/* Every BMI call and every error, as a C program uses them: one server and
 * any number of clients (separate processes), each client running the same
 * script against the server; and a client that vanishes while the server
 * waits for it.
 *
 *   bmi_check server METHOD LISTEN NCLIENTS NCRASH
 *   bmi_check client METHOD SERVER ID
 *   bmi_check crash  METHOD SERVER ID
 *
 * Prints "bmi_check ROLE ...: ok" and exits 0 when every check passed;
 * otherwise says which check failed and exits 1. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bmi.h"

#define WAIT_MS 30000
#define T_HELLO 1
#define T_BYE 2
#define T_FINAL 3
#define T_ARMED 6
#define T_SIZES 100
#define T_LIST 200
#define T_ULIST 201
#define T_ORDER 300
#define T_TRUNC 400
#define T_BIG_UNEXP 500
#define ORDER_N 100

static const char *role = "?";
static int id = -1;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "bmi_check %s %d: line %d: check failed: %s: ", role, \
                    id, __LINE__, #cond);                                       \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, " (last error: %s)\n", BMI_last_error());           \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

static const bmi_size_t sizes[] = {0, 1, 1000, 10000, 16384, 16385, 100000, 1048576, 4194304};
#define NSIZES (int)(sizeof sizes / sizeof sizes[0])

static unsigned char pat(long i, int seed) { return (unsigned char)(i * 31 + seed * 7 + 3); }

static void fill(void *buf, bmi_size_t n, int seed) {
    for (bmi_size_t i = 0; i < n; i++) ((unsigned char *)buf)[i] = pat(i, seed);
}

static int same(const void *buf, bmi_size_t n, int seed) {
    for (bmi_size_t i = 0; i < n; i++)
        if (((const unsigned char *)buf)[i] != pat(i, seed)) return 0;
    return 1;
}

/* Wait for one operation; returns its error code, *size its actual size. */
static bmi_error_code_t wait_op(bmi_op_id_t op, bmi_context_id ctx, bmi_size_t *size) {
    int out = 0;
    bmi_error_code_t err = 0;
    bmi_size_t actual = -1;
    void *user = NULL;
    int ret = BMI_test(op, &out, &err, &actual, &user, WAIT_MS, ctx);
    CHECK(ret == 0, "BMI_test returned %d", ret);
    CHECK(out == 1, "operation %lld did not complete in %d ms", (long long)op, WAIT_MS);
    if (size) *size = actual;
    return err;
}

/* Post a send and wait for it. */
static void send_wait(bmi_addr_t to, const void *buf, bmi_size_t n, int tag, bmi_context_id ctx) {
    bmi_op_id_t op;
    int ret = BMI_post_send(&op, to, buf, n, BMI_EXT_ALLOC, tag, NULL, ctx);
    CHECK(ret >= 0, "BMI_post_send of %lld bytes: %d (%s)", (long long)n, ret, BMI_strerror(ret));
    if (ret == 0) {
        bmi_size_t sent;
        bmi_error_code_t e = wait_op(op, ctx, &sent);
        CHECK(e == 0 && sent == n, "send of %lld bytes ended with %d, %lld sent", (long long)n, e,
              (long long)sent);
    }
}

/* Post a receive and wait for it; returns the error, *got the size. */
static bmi_error_code_t recv_wait(bmi_addr_t from, void *buf, bmi_size_t n, int tag,
                                  bmi_context_id ctx, bmi_size_t *got) {
    bmi_op_id_t op;
    bmi_size_t actual = -1;
    int ret = BMI_post_recv(&op, from, buf, n, &actual, BMI_EXT_ALLOC, tag, NULL, ctx);
    if (ret < 0) {
        /* Failed at once (e.g. the message was there and too long). */
        *got = actual;
        return ret;
    }
    if (ret == 1) {
        *got = actual;
        return 0;
    }
    return wait_op(op, ctx, got);
}

/* ---- the server's unexpected messages, kept per sender until asked for ---- */
#define STASH 256
static struct BMI_unexpected_info stash[STASH];
static int nstash;

/* The next unexpected message with `tag` (from `from`, or anyone if 0). */
static struct BMI_unexpected_info next_unexpected(bmi_addr_t from, int tag) {
    for (;;) {
        for (int i = 0; i < nstash; i++) {
            if (stash[i].tag == tag && (from == 0 || stash[i].addr == from)) {
                struct BMI_unexpected_info u = stash[i];
                memmove(&stash[i], &stash[i + 1], (size_t)(nstash - i - 1) * sizeof stash[0]);
                nstash--;
                return u;
            }
        }
        int out = 0;
        CHECK(nstash < STASH - 4, "too many unexpected messages waiting");
        int ret = BMI_testunexpected(4, &out, &stash[nstash], WAIT_MS);
        CHECK(ret == 0, "BMI_testunexpected: %d", ret);
        CHECK(out > 0, "no unexpected message with tag %d in %d ms", tag, WAIT_MS);
        nstash += out;
    }
}

/* ---- checks that need no peer ---- */
static void local_checks(const char *method) {
    bmi_context_id ctx;
    CHECK(BMI_open_context(&ctx) == -ENXIO, "a call before BMI_initialize");
    CHECK(BMI_initialize(NULL, NULL, 0) == -EINVAL, "NULL method list");
    CHECK(BMI_initialize("bmi_gm", NULL, 0) == -EPROTONOSUPPORT, "unknown method");
    CHECK(BMI_initialize(method, "tcp://", BMI_INIT_SERVER) < 0, "malformed listen address");
    CHECK(strlen(BMI_strerror(-EPROTONOSUPPORT)) > 0, "strerror");
}

static void info_checks(const char *method) {
    CHECK(BMI_get_info(0, BMI_CHECK_INIT, NULL) == 0, "BMI_CHECK_INIT");
    int maxsize = 0, unexp = 0;
    CHECK(BMI_get_info(0, BMI_CHECK_MAXSIZE, &maxsize) == 0 && maxsize > 4194304, "max size %d",
          maxsize);
    CHECK(BMI_get_info(0, BMI_GET_UNEXP_SIZE, &unexp) == 0 && unexp >= 1024, "unexp size %d", unexp);
    bmi_size_t eager = 0, rndv = 0;
    CHECK(BMI_get_info(0, BMI_EAGER_LIMIT, &eager) == 0 && eager > 0, "eager limit");
    CHECK(BMI_get_info(0, BMI_RENDEZVOUS_LIMIT, &rndv) == 0 && rndv > eager, "rendezvous limit");
    /* The first method of the list: what address 0 stands for. */
    char first[16] = {0};
    strncpy(first, method, 7);
    struct BMI_method_info mi = {first, 0, 0, 0};
    CHECK(BMI_get_info(0, BMI_GET_METHOD_INFO, &mi) == 0, "method info");
    CHECK(mi.eager_limit == eager && mi.rendezvous_limit == rndv && mi.unexpected_limit == unexp,
          "method info %lld %lld %lld", (long long)mi.eager_limit, (long long)mi.rendezvous_limit,
          (long long)mi.unexpected_limit);
    struct BMI_method_info bad = {"bmi_gm", 0, 0, 0};
    CHECK(BMI_get_info(0, BMI_GET_METHOD_INFO, &bad) == -EPROTONOSUPPORT, "unknown method info");
    CHECK(BMI_get_info(0, 4242, &eager) == -EINVAL, "unknown option");
    CHECK(BMI_get_info(0, BMI_GET_METH_ADDR, &eager) == -ENOSYS, "unsupported option");
    void *m = BMI_memalloc(0, 100000, BMI_RECV);
    CHECK(m != NULL, "BMI_memalloc");
    memset(m, 1, 100000);
    CHECK(BMI_memfree(0, m, 100000, BMI_RECV) == 0, "BMI_memfree");
    char local[8];
    CHECK(BMI_memfree(0, local, 8, BMI_RECV) == -EINVAL, "BMI_memfree of foreign memory");
    bmi_addr_t a;
    CHECK(BMI_addr_lookup(&a, "[zz:00:00:00:00:01]:7") == -EADDRNOTAVAIL, "bad MAC");
    CHECK(BMI_addr_lookup(&a, "no-port") == -EADDRNOTAVAIL, "no port");
    CHECK(BMI_addr_lookup(&a, "tcp://host:5") == -EADDRNOTAVAIL, "a listen spec");
    CHECK(BMI_addr_lookup(&a, "gm://host:5") == -EPROTONOSUPPORT, "unknown method");
    CHECK(BMI_addr_rev_lookup(987654) == NULL, "unknown address");
}

/* ---- the server ---- */
static void serve_client(bmi_addr_t c, int k, bmi_context_id ctx) {
    /* The replies of every size, the 1 MiB one from BMI_memalloc memory. */
    for (int i = 0; i < NSIZES; i++) {
        bmi_size_t n = sizes[i];
        void *buf = n == 1048576 ? BMI_memalloc(c, n, BMI_SEND) : malloc((size_t)n + 1);
        fill(buf, n, k + i);
        send_wait(c, buf, n, T_SIZES + i, ctx);
        if (n == 1048576) BMI_memfree(c, buf, n, BMI_SEND);
        else free(buf);
    }
    /* A list message into two buffers. */
    {
        static char a[25000], b[25107];
        void *bufs[2] = {a, b};
        bmi_size_t lens[2] = {sizeof a, sizeof b};
        bmi_op_id_t op;
        bmi_size_t got = -1;
        CHECK(BMI_post_recv_list(&op, c, bufs, lens, 2, 40000, &got, BMI_EXT_ALLOC, T_LIST, NULL,
                                 ctx) == -EINVAL,
              "a total that is not the sum of the sizes");
        int ret = BMI_post_recv_list(&op, c, bufs, lens, 2, sizeof a + sizeof b, &got,
                                     BMI_EXT_ALLOC, T_LIST, NULL, ctx);
        CHECK(ret >= 0, "BMI_post_recv_list: %d", ret);
        if (ret == 0) CHECK(wait_op(op, ctx, &got) == 0, "list receive");
        CHECK(got == 50107, "list receive of %lld bytes", (long long)got);
        static char whole[50107];
        memcpy(whole, a, sizeof a);
        memcpy(whole + sizeof a, b, sizeof b);
        CHECK(same(whole, 50107, k + 50), "list content");
        struct BMI_unexpected_info u = next_unexpected(c, T_ULIST);
        CHECK(u.error_code == 0 && u.size == 3000 && same(u.buffer, 3000, k + 51), "unexpected list");
        BMI_unexpected_free(c, u.buffer);
    }
    /* Order: ORDER_N messages with one tag, sizes across the eager limit. */
    {
        static unsigned char buf[70000];
        for (int i = 0; i < ORDER_N; i++) {
            static const bmi_size_t ns[4] = {10, 20000, 300, 70000};
            bmi_size_t got = -1;
            CHECK(recv_wait(c, buf, sizeof buf, T_ORDER, ctx, &got) == 0, "order recv %d", i);
            CHECK(got == ns[i % 4], "message %d has %lld bytes", i, (long long)got);
            int seq;
            memcpy(&seq, buf, sizeof seq);
            CHECK(seq == i, "message %d arrived as number %d", i, seq);
            CHECK(same(buf + 4, got - 4, i), "message %d content", i);
        }
    }
    /* Truncation: an error with the size; the next message intact. */
    {
        static char small[100];
        bmi_size_t got = -1;
        bmi_error_code_t e = recv_wait(c, small, sizeof small, T_TRUNC, ctx, &got);
        CHECK(e == -EMSGSIZE && got == 2000, "truncation gave %d, size %lld", e, (long long)got);
        CHECK(recv_wait(c, small, sizeof small, T_TRUNC, ctx, &got) == 0 && got == 10 &&
                  same(small, 10, 9),
              "the message after a truncated one");
    }
    /* An unexpected message above this server's limit. */
    {
        struct BMI_unexpected_info u = next_unexpected(c, T_BIG_UNEXP);
        CHECK(u.error_code == -EMSGSIZE && u.size == 20000 && u.buffer == NULL,
              "an unexpected message above the limit: %d, %lld", u.error_code, (long long)u.size);
    }
    /* Cancel, test of unknown operations, contexts. */
    {
        char x[8];
        bmi_op_id_t op;
        CHECK(BMI_post_recv(&op, c, x, 8, NULL, BMI_EXT_ALLOC, 999, NULL, ctx) == 0, "post");
        CHECK(BMI_cancel(op, ctx) == 0, "BMI_cancel");
        CHECK(wait_op(op, ctx, NULL) == -ECANCELED, "a cancelled receive");
        int out;
        bmi_error_code_t e;
        CHECK(BMI_test(op, &out, &e, NULL, NULL, 0, ctx) == -EINVAL, "a tested operation is gone");
        CHECK(BMI_cancel(424242, ctx) == -EINVAL, "cancel of an unknown operation");
        CHECK(BMI_post_recv(&op, c, x, 8, NULL, BMI_EXT_ALLOC, 1, NULL, 77) == -EINVAL,
              "an unknown context");
        CHECK(BMI_post_recv(&op, 55555, x, 8, NULL, BMI_EXT_ALLOC, 1, NULL, ctx) == -EINVAL,
              "an unknown address");
        bmi_context_id other;
        CHECK(BMI_open_context(&other) == 0, "second context");
        CHECK(BMI_post_recv(&op, c, x, 8, NULL, BMI_EXT_ALLOC, 998, NULL, other) == 0, "post");
        BMI_close_context(other);
        CHECK(BMI_test(op, &out, &e, NULL, NULL, 0, other) == -EINVAL, "a closed context");
    }
    /* Goodbye: the final reply, then the address is dropped. */
    {
        struct BMI_unexpected_info u = next_unexpected(c, T_BYE);
        BMI_unexpected_free(c, u.buffer);
        long long v = 0x0123456789abcdefLL + k;
        send_wait(c, &v, sizeof v, T_FINAL, ctx);
        CHECK(BMI_set_info(c, BMI_DROP_ADDR, NULL) == 0, "BMI_DROP_ADDR");
        bmi_op_id_t op;
        CHECK(BMI_post_send(&op, c, &v, sizeof v, BMI_EXT_ALLOC, 1, NULL, ctx) == -EINVAL,
              "a dropped address");
    }
}

static int server(const char *method, const char *listen, int nclients, int ncrash) {
    role = "server";
    local_checks(method);
    int ret = BMI_initialize(method, listen, BMI_INIT_SERVER);
    CHECK(ret == 0, "BMI_initialize(%s, %s): %d (%s)", method, listen, ret, BMI_strerror(ret));
    CHECK(BMI_initialize(method, listen, BMI_INIT_SERVER) == -EALREADY, "initialized twice");
    info_checks(method);
    bmi_context_id ctx;
    CHECK(BMI_open_context(&ctx) == 0, "BMI_open_context");
    printf("ready\n");
    fflush(stdout);
    /* Clients in the order their hello arrives; the others' messages wait. */
    for (int done = 0; done < nclients + ncrash; done++) {
        struct BMI_unexpected_info u = next_unexpected(0, T_HELLO);
        CHECK(u.error_code == 0 && u.size == sizeof(int) * 2, "hello of %lld bytes",
              (long long)u.size);
        int hello[2];
        memcpy(hello, u.buffer, sizeof hello);
        BMI_unexpected_free(u.addr, u.buffer);
        const char *name = BMI_addr_rev_lookup(u.addr);
        /* [MAC]:PORT or IP:PORT, of a method in the list. */
        CHECK(name != NULL && strlen(name) > 6 && strstr(name, "://") == NULL &&
                  (strlen(name) > 19 && name[0] == '[' && name[18] == ']'
                       ? strstr(method, "bmi_llc") != NULL
                       : strstr(method, "bmi_tcp") != NULL),
              "peer name %s", name ? name : "?");
        id = hello[0];
        if (hello[1]) {
            /* A client that will vanish: a receive pending on it must fail. */
            char x[8];
            bmi_op_id_t op;
            CHECK(BMI_post_recv(&op, u.addr, x, 8, NULL, BMI_EXT_ALLOC, 7, NULL, ctx) == 0, "post");
            send_wait(u.addr, x, 8, T_ARMED, ctx);
            bmi_error_code_t e = wait_op(op, ctx, NULL);
            CHECK(e == -ECONNRESET || e == -EPIPE, "a vanished peer's receive ended with %d", e);
            CHECK(BMI_post_send(&op, u.addr, x, 8, BMI_EXT_ALLOC, 1, NULL, ctx) < 0,
                  "a send to a vanished peer");
            printf("bmi_check server: client %d vanished, its receive failed with %d\n", id, e);
        } else {
            serve_client(u.addr, id, ctx);
            printf("bmi_check server: client %d served\n", id);
        }
        fflush(stdout);
    }
    id = -1;
    BMI_close_context(ctx);
    CHECK(BMI_finalize() == 0, "BMI_finalize");
    CHECK(BMI_finalize() == -ENXIO, "finalized twice");
    printf("bmi_check server: ok (%d clients, %d vanished)\n", nclients, ncrash);
    return 0;
}

/* ---- a client ---- */
static int client(const char *method, const char *server_addr, int k, int crash) {
    role = crash ? "crash" : "client";
    id = k;
    local_checks(method);
    int ret = BMI_initialize(method, NULL, 0);
    CHECK(ret == 0, "BMI_initialize(%s): %d", method, ret);
    info_checks(method);
    bmi_context_id ctx;
    CHECK(BMI_open_context(&ctx) == 0, "BMI_open_context");
    bmi_addr_t s, again;
    CHECK(BMI_addr_lookup(&s, server_addr) == 0, "lookup %s", server_addr);
    CHECK(BMI_addr_lookup(&again, server_addr) == 0 && again == s, "lookups are cached");
    CHECK(strcmp(BMI_addr_rev_lookup(s), server_addr) == 0, "reverse lookup");
    /* The first reply's receive is posted before the hello. */
    bmi_op_id_t first;
    char zero[1];
    bmi_size_t got = -1;
    int pre = crash ? -1 : BMI_post_recv(&first, s, zero, 0, &got, BMI_EXT_ALLOC, T_SIZES, NULL, ctx);
    CHECK(crash || pre == 0, "a receive nothing was sent for yet: %d", pre);
    int hello[2] = {k, crash};
    bmi_op_id_t op;
    ret = BMI_post_sendunexpected(&op, s, hello, sizeof hello, BMI_EXT_ALLOC, T_HELLO, NULL, ctx);
    CHECK(ret == 1, "a small unexpected send completes at once: %d (%s)", ret, BMI_strerror(ret));
    if (crash) {
        char x[8];
        CHECK(recv_wait(s, x, 8, T_ARMED, ctx, &got) == 0, "armed");
        printf("bmi_check crash %d: vanishing\n", k);
        fflush(stdout);
        _exit(0);
    }
    CHECK(wait_op(first, ctx, &got) == 0 && got == 0, "the 0-byte reply");
    for (int i = 1; i < NSIZES; i++) {
        bmi_size_t n = sizes[i];
        void *buf = n >= 1048576 ? BMI_memalloc(s, n, BMI_RECV) : malloc((size_t)n);
        CHECK(recv_wait(s, buf, n, T_SIZES + i, ctx, &got) == 0, "reply %d", i);
        CHECK(got == n && same(buf, n, k + i), "reply of %lld bytes: %lld, content", (long long)n,
              (long long)got);
        if (n >= 1048576) BMI_memfree(s, buf, n, BMI_RECV);
        else free(buf);
    }
    /* A list message, and an unexpected one. */
    {
        static char whole[50107];
        fill(whole, sizeof whole, k + 50);
        const void *bufs[3] = {whole, whole + 100, whole + 50100};
        bmi_size_t lens[3] = {100, 50000, 7};
        ret = BMI_post_send_list(&op, s, bufs, lens, 3, 50107, BMI_EXT_ALLOC, T_LIST, NULL, ctx);
        CHECK(ret >= 0, "BMI_post_send_list: %d", ret);
        if (ret == 0) CHECK(wait_op(op, ctx, NULL) == 0, "list send");
        static char u[3000];
        fill(u, sizeof u, k + 51);
        const void *ubufs[2] = {u, u + 1000};
        bmi_size_t ulens[2] = {1000, 2000};
        ret = BMI_post_sendunexpected_list(&op, s, ubufs, ulens, 2, 3000, BMI_EXT_ALLOC, T_ULIST,
                                           NULL, ctx);
        CHECK(ret >= 0, "BMI_post_sendunexpected_list: %d", ret);
        if (ret == 0) CHECK(wait_op(op, ctx, NULL) == 0, "unexpected list send");
    }
    /* Order: post them all, then collect with testsome and testcontext. */
    {
        static unsigned char bufs[ORDER_N][70000];
        bmi_op_id_t ops[ORDER_N];
        int pending = 0;
        for (int i = 0; i < ORDER_N; i++) {
            static const bmi_size_t ns[4] = {10, 20000, 300, 70000};
            memcpy(bufs[i], &i, sizeof i);
            fill(bufs[i] + 4, ns[i % 4] - 4, i);
            ret = BMI_post_send(&ops[i], s, bufs[i], ns[i % 4], BMI_EXT_ALLOC, T_ORDER,
                                (void *)(long)i, ctx);
            CHECK(ret >= 0, "order send %d: %d", i, ret);
            if (ret == 1) ops[i] = 0;
            else pending++;
        }
        int idx[ORDER_N], out;
        bmi_error_code_t errs[ORDER_N];
        bmi_size_t lens[ORDER_N];
        void *users[ORDER_N];
        /* Half through testsome over the first half's ids... */
        int half = 0;
        for (int i = 0; i < ORDER_N / 2; i++) half += ops[i] != 0;
        while (half > 0) {
            CHECK(BMI_testsome(ORDER_N / 2, ops, &out, idx, errs, lens, users, WAIT_MS, ctx) == 0,
                  "BMI_testsome");
            CHECK(out > 0, "testsome found nothing in %d ms", WAIT_MS);
            for (int j = 0; j < out; j++) {
                CHECK(errs[j] == 0 && (long)users[j] == idx[j], "send %d", idx[j]);
                ops[idx[j]] = 0;
            }
            half -= out;
            pending -= out;
        }
        /* ...the rest through testcontext. */
        while (pending > 0) {
            bmi_op_id_t done[8];
            CHECK(BMI_testcontext(8, done, &out, errs, lens, users, WAIT_MS, ctx) == 0,
                  "BMI_testcontext");
            CHECK(out > 0 && out <= 8, "testcontext gave %d", out);
            for (int j = 0; j < out; j++) {
                long i = (long)users[j];
                CHECK(errs[j] == 0 && i >= ORDER_N / 2 && done[j] == ops[i], "send %ld", i);
            }
            pending -= out;
        }
    }
    /* A message larger than the server's receive, then a good one. */
    {
        static char big[2000], ten[10];
        fill(big, sizeof big, 8);
        fill(ten, sizeof ten, 9);
        send_wait(s, big, sizeof big, T_TRUNC, ctx);
        send_wait(s, ten, sizeof ten, T_TRUNC, ctx);
    }
    /* Unexpected messages above the limit: refused here; above the
     * server's after raising ours. */
    {
        int limit = 0;
        CHECK(BMI_get_info(s, BMI_GET_UNEXP_SIZE, &limit) == 0, "unexp size");
        static char big[40000];
        CHECK(BMI_post_sendunexpected(&op, s, big, limit + 1, BMI_EXT_ALLOC, T_BIG_UNEXP, NULL,
                                      ctx) == -EMSGSIZE,
              "an unexpected message above the limit");
        bmi_size_t raised = 32768;
        CHECK(BMI_set_info(s, BMI_SET_UNEXP_SIZE, &raised) == 0, "raising the limit");
        bmi_size_t too_far = 1 << 20;
        CHECK(BMI_set_info(s, BMI_SET_UNEXP_SIZE, &too_far) == -EINVAL, "a limit too high");
        ret = BMI_post_sendunexpected(&op, s, big, 20000, BMI_EXT_ALLOC, T_BIG_UNEXP, NULL, ctx);
        CHECK(ret >= 0, "a 20000-byte unexpected message: %d", ret);
        if (ret == 0) CHECK(wait_op(op, ctx, NULL) == 0, "20000-byte unexpected");
    }
    /* Goodbye. */
    {
        ret = BMI_post_sendunexpected(&op, s, "bye", 4, BMI_EXT_ALLOC, T_BYE, NULL, ctx);
        CHECK(ret >= 0, "bye: %d", ret);
        long long v = 0;
        CHECK(recv_wait(s, &v, sizeof v, T_FINAL, ctx, &got) == 0 && got == sizeof v &&
                  v == 0x0123456789abcdefLL + k,
              "the final reply");
    }
    BMI_close_context(ctx);
    CHECK(BMI_finalize() == 0, "BMI_finalize");
    CHECK(BMI_open_context(&ctx) == -ENXIO, "a call after BMI_finalize");
    printf("bmi_check client %d: ok\n", k);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "server") == 0)
        return server(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
    if (argc == 5 && strcmp(argv[1], "client") == 0)
        return client(argv[2], argv[3], atoi(argv[4]), 0);
    if (argc == 5 && strcmp(argv[1], "crash") == 0)
        return client(argv[2], argv[3], atoi(argv[4]), 1);
    fprintf(stderr,
            "usage: bmi_check server METHOD LISTEN NCLIENTS NCRASH\n"
            "       bmi_check client|crash METHOD SERVER ID\n");
    return 2;
}
