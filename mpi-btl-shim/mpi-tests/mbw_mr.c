/*
 * Message rate of P sender/receiver pairs at once, in the manner of OSU's
 * osu_mbw_mr (this is its own code): ranks 0..P-1 send, ranks P..2P-1
 * receive, pair i being rank i -> rank i+P (on the simulated cluster, with
 * P ranks per host, every pair crosses from one host to the other).
 *
 *   mbw_mr [-s SIZES] [-w WINDOW] [-i ITERS] [-x WARMUP]
 *
 *   -s SIZES   message sizes in bytes, comma-separated (default 8)
 *   -w WINDOW  messages per window (default 64)
 *   -i ITERS   timed windows per size (default 1000)
 *   -x WARMUP  untimed windows before them (default 100)
 *   -C         spoil one byte of the first timed window's first message of
 *              pair 0 (shows that the check fails the job)
 *
 * Per window the sender posts WINDOW MPI_Isend and waits for all of them,
 * then receives a small acknowledgement; the receiver posts WINDOW
 * MPI_Irecv, waits for all, checks every byte of every message against the
 * pattern of (pair, window, slot) and sends the acknowledgement, which
 * carries the window's number (the sender checks it). A barrier precedes
 * the timed windows; each sender times its own pair with MPI_Wtime, and the
 * aggregate is the sum of the pairs' rates, as osu_mbw_mr reports it.
 *
 * Rank 0 prints, per size, one line:
 *
 *   mbw_mr pairs=P bytes=B window=W iters=N msgs_per_s=R MB_per_s=M
 *          delivered=D per_pair_msgs_per_s=R0,R1,...
 *
 * (one line; MB are 10^6 bytes; D counts the messages the receivers got and
 * checked, warm-up included, which must be P*W*(N+WARMUP)), then
 * "mbw_mr: OK pairs=P". A byte that differs, a wrong acknowledgement or a
 * wrong count ends the job with MPI_Abort (non-zero exit); bad arguments
 * exit with status 2.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG_DATA 100
#define TAG_ACK 101
#define MAX_SIZES 32

static int rank;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "mbw_mr: rank %d: FAILED: ", rank);                                        \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        MPI_Abort(MPI_COMM_WORLD, 3);                                                              \
    } while (0)

/* The first byte of message `slot` of window `iter` of pair `pair`; byte j
 * of the message is that plus 131*j (mod 256), so a message from another
 * window, slot or pair, or shifted within itself, differs. */
static uint8_t seed(int pair, long iter, int slot)
{
    return (uint8_t) (pair * 59 + iter * 17 + slot * 7 + 1);
}

static void fill(uint8_t *b, size_t len, uint8_t s)
{
    for (size_t j = 0; j < len; j++) {
        b[j] = (uint8_t) (s + 131 * j);
    }
}

static void check(const uint8_t *b, size_t len, int pair, long iter, int slot)
{
    uint8_t s = seed(pair, iter, slot);
    for (size_t j = 0; j < len; j++) {
        if (b[j] != (uint8_t) (s + 131 * j)) {
            FAIL("pair %d, window %ld, message %d of %zu bytes: byte %zu is %u, expected %u", pair,
                 iter, slot, len, j, b[j], (uint8_t) (s + 131 * j));
        }
    }
}

static void usage(void)
{
    if (rank == 0) {
        fprintf(stderr, "usage: mpirun -np 2P mbw_mr [-s SIZES] [-w WINDOW] [-i ITERS] "
                        "[-x WARMUP] [-C]\n");
    }
    MPI_Finalize();
    exit(2);
}

static long number(const char *s, long min, long max)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < min || v > max) {
        if (rank == 0) {
            fprintf(stderr, "mbw_mr: %s is not a number from %ld to %ld\n", s, min, max);
        }
        usage();
    }
    return v;
}

int main(int argc, char **argv)
{
    int nranks;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    size_t sizes[MAX_SIZES] = {8};
    int nsizes = 1;
    int window = 64;
    long iters = 1000, warmup = 100;
    int spoil = 0;
    int opt;
    while ((opt = getopt(argc, argv, "s:w:i:x:C")) != -1) {
        switch (opt) {
        case 's': {
            nsizes = 0;
            char *list = strdup(optarg);
            for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                if (nsizes == MAX_SIZES) {
                    usage();
                }
                sizes[nsizes++] = (size_t) number(tok, 1, 64l << 20);
            }
            free(list);
            if (nsizes == 0) {
                usage();
            }
            break;
        }
        case 'w':
            window = (int) number(optarg, 1, 4096);
            break;
        case 'i':
            iters = number(optarg, 1, 100000000);
            break;
        case 'x':
            warmup = number(optarg, 0, 100000000);
            break;
        case 'C':
            spoil = 1;
            break;
        default:
            usage();
        }
    }
    if (optind != argc || nranks < 2 || nranks % 2 != 0) {
        if (rank == 0 && (nranks < 2 || nranks % 2 != 0)) {
            fprintf(stderr, "mbw_mr: needs an even number of ranks, not %d\n", nranks);
        }
        usage();
    }
    const int pairs = nranks / 2;
    const int sender = rank < pairs;
    const int pair = sender ? rank : rank - pairs;
    const int peer = sender ? rank + pairs : rank - pairs;

    size_t largest = 0;
    for (int k = 0; k < nsizes; k++) {
        largest = sizes[k] > largest ? sizes[k] : largest;
    }
    uint8_t *buf = malloc((size_t) window * largest);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * (size_t) window);
    double *rates = malloc(sizeof(double) * (size_t) nranks);
    if (!buf || !reqs || !rates) {
        FAIL("cannot allocate %d x %zu bytes", window, largest);
    }

    for (int k = 0; k < nsizes; k++) {
        const size_t len = sizes[k];
        double start = 0.0, elapsed = 0.0;
        long long delivered = 0;
        for (long it = 0; it < warmup + iters; it++) {
            if (it == warmup) {
                MPI_Barrier(MPI_COMM_WORLD);
                start = MPI_Wtime();
            }
            if (sender) {
                for (int w = 0; w < window; w++) {
                    uint8_t *m = buf + (size_t) w * len;
                    fill(m, len, seed(pair, it, w));
                    if (spoil && pair == 0 && it == warmup && w == 0) {
                        m[len - 1] ^= 0x40;
                    }
                    MPI_Isend(m, (int) len, MPI_BYTE, peer, TAG_DATA, MPI_COMM_WORLD, &reqs[w]);
                }
                MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
                long ack = -1;
                MPI_Recv(&ack, 1, MPI_LONG, peer, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (ack != it) {
                    FAIL("pair %d: acknowledgement %ld for window %ld", pair, ack, it);
                }
            } else {
                for (int w = 0; w < window; w++) {
                    MPI_Irecv(buf + (size_t) w * len, (int) len, MPI_BYTE, peer, TAG_DATA,
                              MPI_COMM_WORLD, &reqs[w]);
                }
                MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
                for (int w = 0; w < window; w++) {
                    check(buf + (size_t) w * len, len, pair, it, w);
                }
                delivered += window;
                MPI_Send(&it, 1, MPI_LONG, peer, TAG_ACK, MPI_COMM_WORLD);
            }
        }
        elapsed = MPI_Wtime() - start;
        /* Each sender's rate over its own timed windows; receivers give 0. */
        double rate = sender ? (double) iters * window / elapsed : 0.0;
        double total = 0.0;
        long long all_delivered = 0;
        MPI_Reduce(&rate, &total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Reduce(&delivered, &all_delivered, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Gather(&rate, 1, MPI_DOUBLE, rates, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            long long expected = (long long) pairs * window * (warmup + iters);
            if (all_delivered != expected) {
                FAIL("%zu bytes: %lld messages delivered, %lld sent", len, all_delivered,
                     expected);
            }
            printf("mbw_mr pairs=%d bytes=%zu window=%d iters=%ld msgs_per_s=%.2f MB_per_s=%.2f "
                   "delivered=%lld per_pair_msgs_per_s=",
                   pairs, len, window, iters, total, total * (double) len / 1e6, all_delivered);
            for (int p = 0; p < pairs; p++) {
                printf("%s%.2f", p ? "," : "", rates[p]);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("mbw_mr: OK pairs=%d\n", pairs);
        fflush(stdout);
    }
    free(buf);
    free(reqs);
    free(rates);
    MPI_Finalize();
    return 0;
}
