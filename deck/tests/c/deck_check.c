/* Checks of every DECK primitive and every error, run as a DECK job:
 *   deckrun -n N [...] deck_check TEST
 * TEST: ring | all_to_one | nested | sizes | errors | threads | all.
 * Prints "deck_check TEST: ok" on node 0 and exits 0 when every check
 * passed; otherwise prints what failed and exits 1. */
#include <deck.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned long me, n;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "node %lu: %s:%d: check failed: %s (%s)\n", me,  \
                    __FILE__, __LINE__, #cond, deck_last_error());           \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

#define OK(call) CHECK((call) == 0)

static void fill(unsigned char *p, unsigned long len, uint64_t seed) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull | 1;
    for (unsigned long i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)x;
    }
}

static int same(const unsigned char *p, unsigned long len, uint64_t seed) {
    unsigned char *q = malloc(len ? len : 1);
    fill(q, len, seed);
    int r = memcmp(p, q, len) == 0;
    free(q);
    return r;
}

static void mbox_name(char *out, const char *base, unsigned long i) {
    sprintf(out, "%s%lu", base, i);
}

/* A token goes around the ring of all nodes twice. */
static void ring(void) {
    char name[32];
    deck_mbox_t mine, next;
    deck_msg_t m;
    mbox_name(name, "ring", me);
    OK(deck_mbox_create(&mine, name));
    mbox_name(name, "ring", (me + 1) % n);
    OK(deck_mbox_clone(&next, name));
    OK(deck_msg_create(&m, 64));
    long hops = 0;
    if (me == 0) {
        OK(deck_msg_pack(&m, DECK_LONG, &hops, 1));
        OK(deck_mbox_post(&next, &m));
    }
    for (long lap = 0; lap < 2; lap++) {
        OK(deck_mbox_retrv(&mine, &m));
        OK(deck_msg_unpack(&m, DECK_LONG, &hops, 1));
        CHECK(hops == lap * (long)n + (long)((me + n - 1) % n));
        if (!(me == 0 && lap == 1)) {
            OK(deck_msg_clear(&m));
            hops++;
            OK(deck_msg_pack(&m, DECK_LONG, &hops, 1));
            OK(deck_mbox_post(&next, &m));
        }
    }
    OK(deck_barrier());
    OK(deck_mbox_destroy(&mine));
    OK(deck_mbox_destroy(&next));
    OK(deck_msg_destroy(&m));
}

/* Every other node posts 1,000 messages of varied length to node 0, which
 * checks each sender's order and every byte. */
static void all_to_one(void) {
    const long per = 1000;
    deck_mbox_t mb;
    deck_msg_t m;
    OK(deck_msg_create(&m, 4096));
    if (me == 0) {
        OK(deck_mbox_create(&mb, "sink"));
        long *next = calloc(n, sizeof(long));
        unsigned char body[4096];
        for (long k = 0; k < per * (long)(n - 1); k++) {
            long hdr[2];
            OK(deck_mbox_retrv(&mb, &m));
            OK(deck_msg_unpack(&m, DECK_LONG, hdr, 2));
            CHECK(hdr[0] > 0 && hdr[0] < (long)n);
            CHECK(hdr[1] == next[hdr[0]]);
            next[hdr[0]]++;
            unsigned long len = m.datalen - 2 * sizeof(long);
            OK(deck_msg_unpack(&m, DECK_BYTE, body, len));
            CHECK(same(body, len, (uint64_t)hdr[0] * per + hdr[1]));
        }
        for (unsigned long i = 1; i < n; i++) CHECK(next[i] == per);
        free(next);
        OK(deck_barrier());
        OK(deck_mbox_destroy(&mb));
    } else {
        OK(deck_mbox_clone(&mb, "sink"));
        unsigned char body[4096];
        for (long seq = 0; seq < per; seq++) {
            long hdr[2] = {(long)me, seq};
            unsigned long len = (unsigned long)(seq * 37) % 3000;
            OK(deck_msg_clear(&m));
            OK(deck_msg_pack(&m, DECK_LONG, hdr, 2));
            fill(body, len, (uint64_t)me * per + seq);
            OK(deck_msg_pack(&m, DECK_BYTE, body, len));
            OK(deck_mbox_post(&mb, &m));
        }
        OK(deck_barrier());
    }
    OK(deck_msg_destroy(&m));
}

/* Messages nested three deep, with every type, across the network. */
static void nested(void) {
    deck_msg_t inner, middle, outer;
    deck_mbox_t mb;
    OK(deck_msg_create(&inner, 64));
    OK(deck_msg_create(&middle, 256));
    OK(deck_msg_create(&outer, 1024));
    if (me == 1 || n == 1) {
        char c = 'L';
        short s = -7;
        int i = 123456;
        long l = -1234567890123L;
        float f[3] = {1.5f, -2.25f, 3.0f};
        double d = 3.141592653589793;
        unsigned char b[5] = {0, 1, 2, 254, 255};
        OK(deck_msg_pack(&inner, DECK_DOUBLE, &d, 1));
        OK(deck_msg_pack(&inner, DECK_BYTE, b, 5));
        OK(deck_msg_pack(&middle, DECK_SHORT, &s, 1));
        OK(deck_msg_pack(&middle, DECK_MSG, &inner, 1));
        OK(deck_msg_pack(&middle, DECK_FLOAT, f, 3));
        OK(deck_msg_pack(&outer, DECK_CHAR, &c, 1));
        OK(deck_msg_pack(&outer, DECK_MSG, &middle, 1));
        OK(deck_msg_pack(&outer, DECK_INT, &i, 1));
        OK(deck_msg_pack(&outer, DECK_LONG, &l, 1));
        CHECK(outer.datalen == 1 + deck_msg_nested_size(middle.datalen) + sizeof(int) + sizeof(long));
    }
    if (n > 1) {
        if (me == 1) {
            OK(deck_mbox_clone(&mb, "nested"));
            OK(deck_mbox_post(&mb, &outer));
        } else if (me == 0) {
            OK(deck_mbox_create(&mb, "nested"));
            OK(deck_mbox_retrv(&mb, &outer));
        }
    }
    if (me == 0) {
        char c;
        short s;
        int i;
        long l;
        float f[3];
        double d;
        unsigned char b[5];
        deck_msg_t small, m2, m3;
        OK(deck_msg_create(&small, 4));
        OK(deck_msg_create(&m2, 256));
        OK(deck_msg_create(&m3, 64));
        if (n == 1) OK(deck_msg_reset(&outer));
        OK(deck_msg_unpack(&outer, DECK_CHAR, &c, 1));
        CHECK(c == 'L');
        /* Too small a message for the nested one: refused, cursor kept. */
        CHECK(deck_msg_unpack(&outer, DECK_MSG, &small, 1) == DECK_EMSGSIZE);
        CHECK(small.needed == middle.datalen || n > 1);
        OK(deck_msg_unpack(&outer, DECK_MSG, &m2, 1));
        OK(deck_msg_unpack(&outer, DECK_INT, &i, 1));
        OK(deck_msg_unpack(&outer, DECK_LONG, &l, 1));
        CHECK(i == 123456 && l == -1234567890123L);
        OK(deck_msg_unpack(&m2, DECK_SHORT, &s, 1));
        OK(deck_msg_unpack(&m2, DECK_MSG, &m3, 1));
        OK(deck_msg_unpack(&m2, DECK_FLOAT, f, 3));
        CHECK(s == -7 && f[0] == 1.5f && f[1] == -2.25f && f[2] == 3.0f);
        OK(deck_msg_unpack(&m3, DECK_DOUBLE, &d, 1));
        OK(deck_msg_unpack(&m3, DECK_BYTE, b, 5));
        CHECK(d == 3.141592653589793 && b[0] == 0 && b[3] == 254 && b[4] == 255);
        CHECK(deck_msg_unpack(&m3, DECK_BYTE, b, 1) == DECK_EMSGSHORT);
        OK(deck_msg_destroy(&small));
        OK(deck_msg_destroy(&m2));
        OK(deck_msg_destroy(&m3));
    }
    OK(deck_barrier());
    if (n > 1 && me <= 1) OK(deck_mbox_destroy(&mb));
    OK(deck_msg_destroy(&inner));
    OK(deck_msg_destroy(&middle));
    OK(deck_msg_destroy(&outer));
}

/* 0 B to 16 MiB from node 1 to node 0 (and back), byte for byte. */
static void sizes(void) {
    static const unsigned long len[] = {0,      1,       8,       1000,     16384,
                                        16385,  65536,   100000,  1 << 20,  (1 << 20) + 3,
                                        4 << 20, 16 << 20};
    const int k = sizeof(len) / sizeof(len[0]);
    deck_mbox_t mine, peer;
    deck_msg_t m;
    if (me > 1) {
        OK(deck_barrier());
        return;
    }
    OK(deck_msg_create(&m, 16 << 20));
    char name[32];
    mbox_name(name, "sizes", me);
    OK(deck_mbox_create(&mine, name));
    mbox_name(name, "sizes", (me + 1) % (n > 1 ? 2 : 1));
    OK(deck_mbox_clone(&peer, name));
    for (int i = 0; i < k; i++) {
        if (me == 1 || n == 1) {
            OK(deck_msg_clear(&m));
            fill((unsigned char *)m.buf, len[i], (uint64_t)i);
            m.datalen = len[i];
            OK(deck_mbox_post(&peer, &m));
        }
        if (me == 0) {
            memset(m.buf, 0xaa, len[i]);
            OK(deck_mbox_retrv(&mine, &m));
            CHECK(m.datalen == len[i]);
            CHECK(same((unsigned char *)m.buf, len[i], (uint64_t)i));
            CHECK(m.cursor == m.buf);
            /* Back to node 1 unchanged (a large post reads the message in place). */
            if (n > 1) OK(deck_mbox_post(&peer, &m));
        } else if (me == 1) {
            OK(deck_mbox_retrv(&mine, &m));
            CHECK(m.datalen == len[i] && same((unsigned char *)m.buf, len[i], (uint64_t)i));
        }
    }
    OK(deck_barrier());
    OK(deck_mbox_destroy(&mine));
    OK(deck_msg_destroy(&m));
}

/* Every error: a clear code, and nothing lost. */
static void errors(void) {
    deck_msg_t m, small, big;
    deck_mbox_t mb, clone;
    char buf[32];
    OK(deck_msg_create(&m, 8));
    /* Packing past size; unpacking past datalen; unknown type; NULLs. */
    long l = 1;
    int i = 2;
    OK(deck_msg_pack(&m, DECK_LONG, &l, 1));
    CHECK(deck_msg_pack(&m, DECK_INT, &i, 1) == DECK_EMSGFULL);
    CHECK(m.datalen == sizeof(long));
    OK(deck_msg_reset(&m));
    OK(deck_msg_unpack(&m, DECK_LONG, &l, 1));
    CHECK(deck_msg_unpack(&m, DECK_CHAR, buf, 1) == DECK_EMSGSHORT);
    CHECK(deck_msg_pack(&m, 99, &i, 1) == DECK_EINVAL);
    CHECK(deck_msg_pack(NULL, DECK_INT, &i, 1) == DECK_EINVAL);
    CHECK(deck_msg_pack(&m, DECK_INT, NULL, 1) == DECK_EINVAL);
    CHECK(deck_mbox_create(&mb, NULL) == DECK_EINVAL);
    CHECK(deck_mbox_create(&mb, "") == DECK_EINVAL);
    CHECK(strlen(deck_strerror(DECK_EMSGSIZE)) > 10);
    CHECK(strcmp(deck_strerror(12345), "unknown DECK error code") == 0);
    deck_msg_t fake = {0};
    CHECK(deck_msg_pack(&fake, DECK_INT, &i, 1) == DECK_EINVAL);

    OK(deck_msg_create(&small, 16));
    OK(deck_msg_create(&big, 100000));
    if (me == 0) {
        OK(deck_mbox_create(&mb, "errbox"));
        /* Creating a name twice (here and, below, from node 1). */
        CHECK(deck_mbox_create(&clone, "errbox") == DECK_EEXIST);
        OK(deck_barrier()); /* 1: node 1 posted a 5000 B and a 100000 B message, then 4 B */
        for (int k = 0; k < 2; k++) {
            CHECK(deck_mbox_retrv(&mb, &small) == DECK_EMSGSIZE);
            CHECK(small.needed == 5000);
        }
        OK(deck_mbox_retrv(&mb, &big));
        CHECK(big.datalen == 5000 && same((unsigned char *)big.buf, 5000, 7));
        CHECK(deck_mbox_retrv(&mb, &small) == DECK_EMSGSIZE);
        CHECK(small.needed == 100000);
        OK(deck_mbox_retrv(&mb, &big));
        CHECK(big.datalen == 100000 && same((unsigned char *)big.buf, 100000, 8));
        OK(deck_mbox_retrv(&mb, &small));
        CHECK(small.datalen == 4 && memcmp(small.buf, "tail", 4) == 0);
        OK(deck_mbox_destroy(&mb));
        /* The owner's own handle: destroyed. */
        CHECK(deck_mbox_post(&mb, &small) == DECK_EDESTROYED);
        CHECK(deck_mbox_retrv(&mb, &small) == DECK_EDESTROYED);
        OK(deck_barrier()); /* 2: destroyed */
        OK(deck_barrier()); /* 3: node 1 checked */
    } else if (me == 1) {
        OK(deck_mbox_clone(&clone, "errbox"));
        CHECK(deck_mbox_retrv(&clone, &small) == DECK_ENOTOWNER);
        CHECK(deck_mbox_create(&mb, "errbox") == DECK_EEXIST);
        OK(deck_msg_clear(&big));
        fill((unsigned char *)big.buf, 5000, 7);
        big.datalen = 5000;
        OK(deck_mbox_post(&clone, &big));
        fill((unsigned char *)big.buf, 100000, 8);
        big.datalen = 100000;
        OK(deck_barrier()); /* 1 */
        /* A large post returns when the owner has taken it. */
        OK(deck_mbox_post(&clone, &big));
        OK(deck_msg_clear(&small));
        OK(deck_msg_pack(&small, DECK_CHAR, "tail", 4));
        OK(deck_mbox_post(&clone, &small));
        OK(deck_barrier()); /* 2 */
        CHECK(deck_mbox_post(&clone, &small) == DECK_EDESTROYED);
        CHECK(deck_mbox_post(&clone, &big) == DECK_EDESTROYED);
        /* The name is free again once destroyed. */
        OK(deck_mbox_create(&mb, "errbox"));
        OK(deck_mbox_destroy(&mb));
        OK(deck_barrier()); /* 3 */
    } else {
        OK(deck_barrier());
        OK(deck_barrier());
        OK(deck_barrier());
    }
    /* A name that never appears (DECK_CLONE_WAIT_MS bounds the wait). */
    mbox_name(buf, "never", me);
    CHECK(deck_mbox_clone(&clone, buf) == DECK_ENOENT);
    OK(deck_msg_destroy(&m));
    OK(deck_msg_destroy(&small));
    OK(deck_msg_destroy(&big));
    CHECK(deck_msg_destroy(&m) == DECK_EINVAL);
    OK(deck_barrier());
}

/* Several threads of each node own mailboxes; each thread of node i posts
 * to the same thread index on node i+1. */
#define THREADS 3
static void *thread_main(void *arg) {
    long t = (long)arg;
    char name[32];
    deck_mbox_t mine, next;
    deck_msg_t m;
    sprintf(name, "t%ld.%lu", t, me);
    OK(deck_mbox_create(&mine, name));
    sprintf(name, "t%ld.%lu", t, (me + 1) % n);
    OK(deck_mbox_clone(&next, name));
    OK(deck_msg_create(&m, 64));
    for (long k = 0; k < 200; k++) {
        long v[2] = {t, k};
        OK(deck_msg_clear(&m));
        OK(deck_msg_pack(&m, DECK_LONG, v, 2));
        OK(deck_mbox_post(&next, &m));
    }
    for (long k = 0; k < 200; k++) {
        long v[2];
        OK(deck_mbox_retrv(&mine, &m));
        OK(deck_msg_unpack(&m, DECK_LONG, v, 2));
        CHECK(v[0] == t && v[1] == k);
    }
    OK(deck_msg_destroy(&m));
    return NULL;
}

static void threads(void) {
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++) CHECK(pthread_create(&th[t], NULL, thread_main, (void *)t) == 0);
    for (long t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    OK(deck_barrier());
}

int main(int argc, char **argv) {
    const char *test = argc > 1 ? argv[1] : "all";
    deck_msg_t m;
    CHECK(deck_barrier() == DECK_ENOINIT);
    int rc = deck_init(&argc, &argv);
    if (rc != 0) {
        fprintf(stderr, "deck_init: %s: %s\n", deck_strerror(rc), deck_last_error());
        return 1;
    }
    CHECK(deck_init(&argc, &argv) == DECK_EINVAL);
    me = deck_node();
    n = deck_numnodes();
    CHECK(me < n);
    int all = strcmp(test, "all") == 0;
    if (all || !strcmp(test, "ring")) ring();
    if (all || !strcmp(test, "all_to_one")) all_to_one();
    if (all || !strcmp(test, "nested")) nested();
    if (all || !strcmp(test, "sizes")) sizes();
    if (all || !strcmp(test, "errors")) errors();
    if (all || !strcmp(test, "threads")) threads();
    (void)m;
    OK(deck_done());
    CHECK(deck_done() == DECK_ENOINIT);
    if (me == 0) printf("deck_check %s: ok (%lu nodes)\n", test, n);
    return 0;
}
