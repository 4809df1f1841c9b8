/*
 * Seed 002's application kernels as one MPI program (its own code): the
 * exchange and all-to-all tests, a distributed matrix transpose, a six-step
 * 1-D FFT with all-to-all transposes, a parallel radix sort with irregular
 * many-to-many traffic, and small random updates (GUPS-like).
 *
 *   kernels KERNELS [options]      KERNELS: comma-separated names, or "all"
 *
 *   exchange   each rank and its partner (rank ^ 1) post WINDOW MPI_Irecv and
 *              WINDOW MPI_Isend both ways at once, then wait for all; per size
 *              of -s. MB_per_s is the pair's bidirectional bandwidth
 *              (2 * WINDOW * bytes per iteration).
 *   alltoall   all-to-all of one block per rank pair, per size of -s: the
 *              pairwise algorithm (step k: partner rank ^ k when the rank
 *              count is a power of two, else send to rank+k, receive from
 *              rank-k; MPI_Sendrecv) and MPI_Alltoall. MB_per_s is what one
 *              rank sends to the others per second.
 *   transpose  the distributed transpose of a 2^n complex-double matrix
 *              (rows block-distributed; pack, MPI_Alltoall of blocks, local
 *              transposes), repeated there and back: the FFT's communication.
 *   fft        the six-step 1-D FFT of N = 2^n = n1*n2 complex doubles
 *              (transpose, n1 FFTs of length n2, twiddles, transpose, n2 FFTs
 *              of length n1, transpose), forward then inverse per repetition;
 *              gflops counts 5 N log2 N per transform.
 *   radix      LSD radix sort of 2^k random 64-bit keys per rank, -d bits per
 *              digit; per pass a local histogram, MPI_Allgather of the
 *              histograms (global digit offsets), MPI_Alltoall of the counts,
 *              MPI_Alltoallv of the keys, a local stable counting sort.
 *   updates    2^u random updates per rank into a table of 2^t 64-bit words
 *              per rank: an update v goes to word v mod (ranks * 2^t), whose
 *              owner xors v into it; updates for other ranks leave in batches
 *              of -b (8 bytes each) by MPI_Isend, receivers have MPI_Irecv
 *              (MPI_ANY_SOURCE) posted; an empty message ends a sender.
 *
 *   -s SIZES   exchange/alltoall message sizes, bytes, comma-separated
 *              (default 8,4096,65536,1048576)
 *   -w WINDOW  exchange: messages each way per iteration (default 1)
 *   -V MIB     exchange/alltoall: bytes each rank sends per size, MiB, which
 *              sets the iterations (default 64)
 *   -i ITERS   exchange/alltoall: at most this many iterations (default 2000)
 *   -g KIB     alltoall: local work between two all-to-alls, a sweep over this
 *              many KiB of the rank's own memory (default 0: none); the line
 *              then also prints gap_kib and comm_s (time inside the
 *              all-to-all), as a computing application's exchanges see it
 *   -n LOG2N   transpose/fft: matrix / transform size 2^n (default 20)
 *   -k LOG2K   radix: keys per rank 2^k (default 20)
 *   -d BITS    radix: bits per digit (default 8)
 *   -u LOG2U   updates: updates per rank 2^u (default 20)
 *   -t LOG2T   updates: table words per rank 2^t (default 16)
 *   -b BATCH   updates: updates per message, 1..64 (default 4: 32 bytes)
 *   -r REPS    transpose/fft/radix/updates: timed repetitions (default 4): round
 *              trips of the transpose, forward+inverse pairs of the FFT, sorts,
 *              rounds of updates (the printed reps= counts transposes and
 *              transforms, twice REPS)
 *   -C         spoil one value on purpose in every kernel run (shows that
 *              the checks fail the job)
 *
 * Every kernel is run once untimed (warm-up), then timed after a barrier;
 * time_s is the slowest rank's time per operation (one iteration, one
 * all-to-all, one transpose, one transform, one sort, one round of updates).
 * transpose, fft and radix also print comm_s: of that, the slowest rank's
 * time inside MPI's collectives (the rest is local work).
 * Rank 0 prints one line per result, e.g.
 *
 *   kernels: fft ranks=2 n=1048576 n1=1024 n2=1024 reps=8 time_s=0.0371
 *            comm_s=0.0152 gflops=2.8 roundtrip_err=5e-15 dft_err=7e-14 check=ok
 *
 * (one line) and at the end "kernels: OK ranks=P". Checks:
 *   exchange/alltoall: every message carries a pattern of (source,
 *     destination, size) with the iteration stamped at its first, middle and
 *     last byte; the stamps are checked on every message, every byte on the
 *     first and the last timed iteration;
 *   transpose: after the repetitions (there and back) every element equals
 *     the function of its global row and column it started as;
 *   fft: forward then inverse gives the input back to 1e-9 relative (after
 *     all repetitions), and five output points match a direct DFT to 1e-9;
 *   radix: each rank's keys sorted, the ranks' boundaries ordered, each rank
 *     holds as many keys as it started with, and the global count, sum, xor
 *     and sum of hashes of the keys are unchanged;
 *   updates: every received update belongs to the receiver, every rank's
 *     table equals a recomputation from all ranks' update streams, and the
 *     update count matches.
 * A failed check ends the job with MPI_Abort (non-zero exit) and a line
 * "kernels: rank R: FAILED: KERNEL: ..."; bad arguments exit with status 2.
 */
#include <complex.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SIZES 32
#define TAG_EXCH 200
#define TAG_A2A 201
#define TAG_UPD 202

static int rank, nranks;
static int spoil;
static const char *current = "setup";
/* Seconds this rank spent inside the collectives of transpose and radix
 * sort: how much of a kernel's time is communication (comm_s). */
static double comm_time;

/* One line per failure (one write, so the ranks' lines do not mix). */
#define FAIL(...)                                                                                  \
    do {                                                                                           \
        char why_[512];                                                                            \
        snprintf(why_, sizeof why_, __VA_ARGS__);                                                  \
        fprintf(stderr, "kernels: rank %d: FAILED: %s: %s\n", rank, current, why_);               \
        fflush(stderr);                                                                            \
        MPI_Abort(MPI_COMM_WORLD, 3);                                                              \
    } while (0)

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        FAIL("cannot allocate %zu bytes", n);
    }
    return p;
}

/* SplitMix64: the keys, updates and FFT inputs, reproducible from a seed. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The slowest rank's elapsed time, known to every rank. */
static double slowest(double t)
{
    double m;
    MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

/* ---- exchange and all-to-all: patterned messages ----------------------- */

/* Byte j of a message from `src` to `dst` of `len` bytes, iteration `it`:
 * a pattern of (src, dst, len, j), with the iteration added at the stamped
 * positions (first, middle, last byte). */
static uint8_t pattern(int src, int dst, size_t len, size_t j, long it)
{
    uint8_t v = (uint8_t) (src * 59 + dst * 31 + len * 7 + 131 * j + 1);
    if (j == 0 || j == len / 2 || j == len - 1) {
        v = (uint8_t) (v + it * 17 + 3);
    }
    return v;
}

static void fill_msg(uint8_t *b, int src, int dst, size_t len)
{
    for (size_t j = 0; j < len; j++) {
        b[j] = pattern(src, dst, len, j, 0);
    }
}

/* Re-stamp a filled message from iteration `from` to `to`. */
static void stamp_msg(uint8_t *b, int src, int dst, size_t len, long to)
{
    b[0] = pattern(src, dst, len, 0, to);
    b[len / 2] = pattern(src, dst, len, len / 2, to);
    b[len - 1] = pattern(src, dst, len, len - 1, to);
}

static void check_msg(const uint8_t *b, int src, int dst, size_t len, long it, int full)
{
    size_t probe[3] = {0, len / 2, len - 1};
    for (int k = 0; k < 3; k++) {
        uint8_t want = pattern(src, dst, len, probe[k], it);
        if (b[probe[k]] != want) {
            FAIL("message %d->%d of %zu bytes, iteration %ld: byte %zu is %u, expected %u", src,
                 dst, len, it, probe[k], b[probe[k]], want);
        }
    }
    if (full) {
        for (size_t j = 0; j < len; j++) {
            uint8_t want = pattern(src, dst, len, j, it);
            if (b[j] != want) {
                FAIL("message %d->%d of %zu bytes, iteration %ld: byte %zu is %u, expected %u",
                     src, dst, len, it, j, b[j], want);
            }
        }
    }
}

/* Iterations for `len`-byte messages: `volume` bytes sent per rank, within
 * [5, max_iters]. */
static long iters_for(size_t len, size_t per_iter, long volume, long max_iters)
{
    long n = (long) ((size_t) volume / (len * per_iter));
    if (n > max_iters) {
        n = max_iters;
    }
    return n < 5 ? 5 : n;
}

static void kernel_exchange(const size_t *sizes, int nsizes, int window, long volume,
                            long max_iters)
{
    current = "exchange";
    if (nranks % 2 != 0) {
        FAIL("needs an even number of ranks, not %d", nranks);
    }
    const int peer = rank ^ 1;
    size_t largest = 0;
    for (int k = 0; k < nsizes; k++) {
        largest = sizes[k] > largest ? sizes[k] : largest;
    }
    uint8_t *sbuf = xmalloc((size_t) window * largest);
    uint8_t *rbuf = xmalloc((size_t) window * largest);
    MPI_Request *reqs = xmalloc(sizeof(MPI_Request) * 2 * (size_t) window);
    for (int k = 0; k < nsizes; k++) {
        const size_t len = sizes[k];
        const long iters = iters_for(len, (size_t) window, volume, max_iters);
        const long warmup = iters / 10 + 1;
        for (int w = 0; w < window; w++) {
            fill_msg(sbuf + (size_t) w * len, rank, peer, len);
        }
        double start = 0.0;
        for (long it = 0; it < warmup + iters; it++) {
            if (it == warmup) {
                MPI_Barrier(MPI_COMM_WORLD);
                start = MPI_Wtime();
            }
            for (int w = 0; w < window; w++) {
                MPI_Irecv(rbuf + (size_t) w * len, (int) len, MPI_BYTE, peer, TAG_EXCH,
                          MPI_COMM_WORLD, &reqs[w]);
            }
            for (int w = 0; w < window; w++) {
                uint8_t *m = sbuf + (size_t) w * len;
                stamp_msg(m, rank, peer, len, it * window + w);
                MPI_Isend(m, (int) len, MPI_BYTE, peer, TAG_EXCH, MPI_COMM_WORLD,
                          &reqs[window + w]);
            }
            /* -C: the last iteration's first message from rank 0, spoiled
             * (MPI_Isend may copy only later: it is changed before). */
            int spoilt = spoil && rank == 0 && it == warmup + iters - 2 && len > 3;
            MPI_Waitall(2 * window, reqs, MPI_STATUSES_IGNORE);
            if (spoilt) {
                sbuf[1] ^= 0x40;
            }
            int full = it == warmup || it == warmup + iters - 1;
            for (int w = 0; w < window; w++) {
                check_msg(rbuf + (size_t) w * len, peer, rank, len, it * window + w, full);
            }
        }
        double t = slowest(MPI_Wtime() - start) / (double) iters;
        if (rank == 0) {
            printf("kernels: exchange ranks=%d bytes=%zu window=%d iters=%ld time_s=%.9f "
                   "MB_per_s=%.2f check=ok\n",
                   nranks, len, window, iters, t, 2.0 * window * (double) len / t / 1e6);
            fflush(stdout);
        }
    }
    free(sbuf);
    free(rbuf);
    free(reqs);
}

/* One all-to-all of `len`-byte blocks: pairwise MPI_Sendrecv steps. */
static void alltoall_pairwise(const uint8_t *sbuf, uint8_t *rbuf, size_t len)
{
    const int pow2 = (nranks & (nranks - 1)) == 0;
    memcpy(rbuf + (size_t) rank * len, sbuf + (size_t) rank * len, len);
    for (int k = 1; k < nranks; k++) {
        int to = pow2 ? rank ^ k : (rank + k) % nranks;
        int from = pow2 ? rank ^ k : (rank - k + nranks) % nranks;
        MPI_Sendrecv(sbuf + (size_t) to * len, (int) len, MPI_BYTE, to, TAG_A2A,
                     rbuf + (size_t) from * len, (int) len, MPI_BYTE, from, TAG_A2A,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
}

/* Local work between two all-to-alls: a sweep over `kib` KiB of this rank's
 * own memory (writes then reads), which leaves the caches as a computing
 * kernel does. */
static uint64_t sweep(uint64_t *mem, size_t words, long it)
{
    for (size_t j = 0; j < words; j++) {
        mem[j] = mix64((uint64_t) it + j);
    }
    uint64_t acc = 0;
    for (size_t j = 0; j < words; j++) {
        acc += mem[j];
    }
    return acc;
}

static void kernel_alltoall(const size_t *sizes, int nsizes, long volume, long max_iters,
                            long gap_kib)
{
    const size_t gap_words = (size_t) gap_kib * 1024 / 8;
    uint64_t *gap = gap_words ? xmalloc(gap_words * 8) : NULL;
    volatile uint64_t gap_acc = 0;
    size_t largest = 0;
    for (int k = 0; k < nsizes; k++) {
        largest = sizes[k] > largest ? sizes[k] : largest;
    }
    uint8_t *sbuf = xmalloc((size_t) nranks * largest);
    uint8_t *rbuf = xmalloc((size_t) nranks * largest);
    for (int variant = 0; variant < 2; variant++) {
        const char *name = variant == 0 ? "pairwise" : "mpi";
        current = variant == 0 ? "alltoall pairwise" : "alltoall mpi";
        for (int k = 0; k < nsizes; k++) {
            const size_t len = sizes[k];
            const long iters =
                iters_for(len, (size_t) (nranks > 1 ? nranks - 1 : 1), volume, max_iters);
            const long warmup = iters / 10 + 1;
            for (int d = 0; d < nranks; d++) {
                fill_msg(sbuf + (size_t) d * len, rank, d, len);
            }
            double start = 0.0;
            comm_time = 0.0;
            for (long it = 0; it < warmup + iters; it++) {
                if (it == warmup) {
                    MPI_Barrier(MPI_COMM_WORLD);
                    start = MPI_Wtime();
                    comm_time = 0.0;
                }
                if (gap) {
                    gap_acc += sweep(gap, gap_words, it);
                }
                for (int d = 0; d < nranks; d++) {
                    stamp_msg(sbuf + (size_t) d * len, rank, d, len, it);
                }
                /* The block for the next rank, on the last iteration. */
                uint8_t *victim = sbuf + (size_t) ((rank + 1) % nranks) * len;
                int spoilt = spoil && rank == 0 && it == warmup + iters - 1 && len > 3;
                if (spoilt) {
                    victim[1] ^= 0x40;
                }
                double t0 = MPI_Wtime();
                if (variant == 0) {
                    alltoall_pairwise(sbuf, rbuf, len);
                } else {
                    MPI_Alltoall(sbuf, (int) len, MPI_BYTE, rbuf, (int) len, MPI_BYTE,
                                 MPI_COMM_WORLD);
                }
                comm_time += MPI_Wtime() - t0;
                if (spoilt) {
                    victim[1] ^= 0x40;
                }
                int full = it == warmup || it == warmup + iters - 1;
                for (int s = 0; s < nranks; s++) {
                    check_msg(rbuf + (size_t) s * len, s, rank, len, it, full);
                }
            }
            double t = slowest(MPI_Wtime() - start) / (double) iters;
            double c = slowest(comm_time) / (double) iters;
            if (rank == 0) {
                char gap_fields[96] = "";
                if (gap) {
                    snprintf(gap_fields, sizeof gap_fields, " gap_kib=%ld comm_s=%.9f", gap_kib,
                             c);
                }
                printf("kernels: alltoall ranks=%d variant=%s bytes=%zu iters=%ld time_s=%.9f%s "
                       "MB_per_s=%.2f check=ok\n",
                       nranks, name, len, iters, t, gap_fields,
                       (double) (nranks - 1) * (double) len / t / 1e6);
                fflush(stdout);
            }
        }
    }
    free(sbuf);
    free(rbuf);
    free(gap);
}

/* ---- the distributed transpose ------------------------------------------ */

typedef double complex cplx;

/* a*b without C99's infinity/NaN recovery (__muldc3), which would cost a
 * library call per butterfly; the kernels' values are finite. */
static inline cplx cmul(cplx a, cplx b)
{
    double ar = creal(a), ai = cimag(a), br = creal(b), bi = cimag(b);
    return (ar * br - ai * bi) + I * (ar * bi + ai * br);
}

/* Set (for one message) by a kernel run with -C: the next transpose on rank
 * 0 changes one element of the block it sends to the next rank. */
static int spoil_next_transpose;

/* `src`: this rank's rows/P rows of a rows x cols row-major matrix; `dst`
 * gets this rank's cols/P rows of its transpose (cols x rows). sbuf and rbuf
 * hold rows*cols/P elements each. */
static void transpose(const cplx *src, cplx *dst, size_t rows, size_t cols, cplx *sbuf,
                      cplx *rbuf)
{
    const size_t lr = rows / (size_t) nranks, lc = cols / (size_t) nranks;
    const size_t block = lr * lc;
    for (int d = 0; d < nranks; d++) {
        cplx *out = sbuf + (size_t) d * block;
        for (size_t i = 0; i < lr; i++) {
            memcpy(out + i * lc, src + i * cols + (size_t) d * lc, lc * sizeof(cplx));
        }
    }
    if (spoil_next_transpose && rank == 0) {
        sbuf[(size_t) ((rank + 1) % nranks) * block + block / 2] += 1.0;
        spoil_next_transpose = 0;
    }
    double t0 = MPI_Wtime();
    MPI_Alltoall(sbuf, (int) (2 * block), MPI_DOUBLE, rbuf, (int) (2 * block), MPI_DOUBLE,
                 MPI_COMM_WORLD);
    comm_time += MPI_Wtime() - t0;
    /* Block from rank s: rows s*lr.. of the source, my columns. */
    for (int s = 0; s < nranks; s++) {
        const cplx *in = rbuf + (size_t) s * block;
        for (size_t i = 0; i < lr; i++) {
            for (size_t j = 0; j < lc; j++) {
                dst[j * rows + (size_t) s * lr + i] = in[i * lc + j];
            }
        }
    }
}

/* Element (r, c) of the transpose kernel's matrix. */
static cplx tp_value(size_t r, size_t c)
{
    return (double) r + I * (double) c;
}

static void kernel_transpose(int log2n, int reps)
{
    current = "transpose";
    const size_t n = (size_t) 1 << log2n;
    const size_t rows = (size_t) 1 << (log2n / 2), cols = n / rows;
    if (rows % (size_t) nranks || cols % (size_t) nranks) {
        FAIL("a %zu x %zu matrix does not split over %d ranks", rows, cols, nranks);
    }
    const size_t local = n / (size_t) nranks;
    cplx *a = xmalloc(local * sizeof(cplx));
    cplx *b = xmalloc(local * sizeof(cplx));
    cplx *sbuf = xmalloc(local * sizeof(cplx));
    cplx *rbuf = xmalloc(local * sizeof(cplx));
    const size_t lr = rows / (size_t) nranks;
    for (size_t i = 0; i < lr; i++) {
        for (size_t c = 0; c < cols; c++) {
            a[i * cols + c] = tp_value((size_t) rank * lr + i, c);
        }
    }
    /* Warm-up: there and back. */
    transpose(a, b, rows, cols, sbuf, rbuf);
    transpose(b, a, cols, rows, sbuf, rbuf);
    spoil_next_transpose = spoil;
    MPI_Barrier(MPI_COMM_WORLD);
    comm_time = 0.0;
    double start = MPI_Wtime();
    for (int r = 0; r < reps; r++) {
        transpose(a, b, rows, cols, sbuf, rbuf);
        transpose(b, a, cols, rows, sbuf, rbuf);
    }
    double t = slowest(MPI_Wtime() - start) / (2.0 * reps);
    double comm = slowest(comm_time) / (2.0 * reps);
    for (size_t i = 0; i < lr; i++) {
        for (size_t c = 0; c < cols; c++) {
            size_t gr = (size_t) rank * lr + i;
            cplx want = tp_value(gr, c), got = a[i * cols + c];
            if (got != want) {
                FAIL("element (%zu, %zu) is %g%+gi, expected %g%+gi", gr, c, creal(got),
                     cimag(got), creal(want), cimag(want));
            }
        }
    }
    if (rank == 0) {
        /* Each rank sends all but its own block. */
        double moved = (double) (local - local / (size_t) nranks) * sizeof(cplx);
        printf("kernels: transpose ranks=%d n=%zu rows=%zu cols=%zu reps=%d time_s=%.9f "
               "comm_s=%.9f MB_per_s=%.2f check=ok\n",
               nranks, n, rows, cols, 2 * reps, t, comm, moved / t / 1e6);
        fflush(stdout);
    }
    free(a);
    free(b);
    free(sbuf);
    free(rbuf);
}

/* ---- the six-step FFT ---------------------------------------------------- */

/* An in-place iterative radix-2 FFT of length n (a power of two). */
struct plan {
    size_t n;
    cplx *w;        /* w[k] = exp(-2 pi i k / n), k < n/2 */
    uint32_t *perm; /* bit reversal */
};

static void plan_init(struct plan *p, size_t n)
{
    p->n = n;
    p->w = xmalloc((n / 2 + 1) * sizeof(cplx));
    p->perm = xmalloc(n * sizeof(uint32_t));
    for (size_t k = 0; k < n / 2; k++) {
        double a = -2.0 * M_PI * (double) k / (double) n;
        p->w[k] = cos(a) + I * sin(a);
    }
    int bits = 0;
    while (((size_t) 1 << bits) < n) {
        bits++;
    }
    for (size_t i = 0; i < n; i++) {
        size_t r = 0;
        for (int b = 0; b < bits; b++) {
            r |= ((i >> b) & 1) << (bits - 1 - b);
        }
        p->perm[i] = (uint32_t) r;
    }
}

static void plan_free(struct plan *p)
{
    free(p->w);
    free(p->perm);
}

/* sign -1: forward (exp(-...)), +1: inverse without the 1/n. */
static void fft1d(const struct plan *p, cplx *x, int sign)
{
    const size_t n = p->n;
    for (size_t i = 0; i < n; i++) {
        size_t j = p->perm[i];
        if (i < j) {
            cplx t = x[i];
            x[i] = x[j];
            x[j] = t;
        }
    }
    for (size_t len = 2; len <= n; len <<= 1) {
        const size_t half = len / 2, stride = n / len;
        for (size_t k = 0; k < half; k++) {
            cplx w = p->w[k * stride];
            if (sign > 0) {
                w = conj(w);
            }
            for (size_t s = 0; s < n; s += len) {
                cplx u = x[s + k], v = cmul(x[s + k + half], w);
                x[s + k] = u + v;
                x[s + k + half] = u - v;
            }
        }
    }
}

struct fft6 {
    size_t n, n1, n2, local;
    struct plan p1, p2;
    cplx *tw; /* tw[j1 local][k2] = exp(-2 pi i j1 k2 / N) for my rows j1 */
    cplx *b, *sbuf, *rbuf;
};

/* x: this rank's N/P consecutive points; in place, result in natural order
 * (this rank's N/P consecutive outputs). */
static void fft6_run(struct fft6 *f, cplx *x, int sign)
{
    const size_t n1 = f->n1, n2 = f->n2;
    /* 1. x as an n2 x n1 matrix (row j2 = x[n1*j2 ...]) -> n1 x n2. */
    transpose(x, f->b, n2, n1, f->sbuf, f->rbuf);
    /* 2. n1/P FFTs of length n2 over j2. */
    const size_t my1 = n1 / (size_t) nranks;
    for (size_t r = 0; r < my1; r++) {
        fft1d(&f->p2, f->b + r * n2, sign);
    }
    /* 3. twiddles. */
    for (size_t i = 0; i < my1 * n2; i++) {
        f->b[i] = cmul(f->b[i], sign < 0 ? f->tw[i] : conj(f->tw[i]));
    }
    /* 4. -> n2 x n1. */
    transpose(f->b, x, n1, n2, f->sbuf, f->rbuf);
    /* 5. n2/P FFTs of length n1 over j1. */
    const size_t my2 = n2 / (size_t) nranks;
    for (size_t r = 0; r < my2; r++) {
        fft1d(&f->p1, x + r * n1, sign);
    }
    /* 6. -> n1 x n2: X[k2 + n2*k1] at row k1, column k2. */
    transpose(x, f->b, n2, n1, f->sbuf, f->rbuf);
    const double scale = sign > 0 ? 1.0 / (double) f->n : 1.0;
    for (size_t i = 0; i < f->local; i++) {
        x[i] = f->b[i] * scale;
    }
}

/* Input point j of the FFT kernel: reproducible, independent of P. */
static cplx fft_input(size_t j)
{
    uint64_t a = mix64(2 * j), b = mix64(2 * j + 1);
    return ((double) (a >> 11) / 9007199254740992.0 * 2.0 - 1.0) +
           I * ((double) (b >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void kernel_fft(int log2n, int reps)
{
    current = "fft";
    struct fft6 f;
    f.n = (size_t) 1 << log2n;
    f.n1 = (size_t) 1 << (log2n / 2);
    f.n2 = f.n / f.n1;
    if (f.n1 % (size_t) nranks || f.n2 % (size_t) nranks) {
        FAIL("N = %zu x %zu does not split over %d ranks", f.n1, f.n2, nranks);
    }
    f.local = f.n / (size_t) nranks;
    plan_init(&f.p1, f.n1);
    plan_init(&f.p2, f.n2);
    f.tw = xmalloc(f.local * sizeof(cplx));
    f.b = xmalloc(f.local * sizeof(cplx));
    f.sbuf = xmalloc(f.local * sizeof(cplx));
    f.rbuf = xmalloc(f.local * sizeof(cplx));
    const size_t my1 = f.n1 / (size_t) nranks;
    for (size_t r = 0; r < my1; r++) {
        size_t j1 = (size_t) rank * my1 + r;
        for (size_t k2 = 0; k2 < f.n2; k2++) {
            double a = -2.0 * M_PI * (double) ((j1 * k2) % f.n) / (double) f.n;
            f.tw[r * f.n2 + k2] = cos(a) + I * sin(a);
        }
    }
    cplx *x = xmalloc(f.local * sizeof(cplx));
    cplx *orig = xmalloc(f.local * sizeof(cplx));
    const size_t first = (size_t) rank * f.local;
    double norm2 = 0.0, maxabs = 0.0;
    for (size_t i = 0; i < f.local; i++) {
        x[i] = orig[i] = fft_input(first + i);
        norm2 += creal(x[i]) * creal(x[i]) + cimag(x[i]) * cimag(x[i]);
        maxabs = fmax(maxabs, cabs(x[i]));
    }
    MPI_Allreduce(MPI_IN_PLACE, &norm2, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &maxabs, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    /* Warm-up and the DFT check: one forward transform, five points
     * compared with a direct DFT, then back. */
    spoil_next_transpose = spoil;
    fft6_run(&f, x, -1);
    const size_t points[5] = {0, 1, f.n / 2 + 3, f.n - 1, (size_t) (mix64(7) % f.n)};
    double sums[10];
    for (int q = 0; q < 5; q++) {
        cplx s = 0.0;
        for (size_t i = 0; i < f.local; i++) {
            size_t j = first + i;
            double a = -2.0 * M_PI * (double) ((j * points[q]) % f.n) / (double) f.n;
            s += cmul(orig[i], cos(a) + I * sin(a));
        }
        sums[2 * q] = creal(s);
        sums[2 * q + 1] = cimag(s);
    }
    MPI_Allreduce(MPI_IN_PLACE, sums, 10, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double dft_err = 0.0;
    for (int q = 0; q < 5; q++) {
        size_t k = points[q];
        if (k / f.local == (size_t) rank) {
            cplx want = sums[2 * q] + I * sums[2 * q + 1];
            double e = cabs(x[k - first] - want) / sqrt(norm2);
            if (!(e <= 1e-9)) {
                FAIL("output point %zu is %.12g%+.12gi, a direct DFT gives %.12g%+.12gi "
                     "(relative error %.3g)",
                     k, creal(x[k - first]), cimag(x[k - first]), creal(want), cimag(want), e);
            }
            dft_err = fmax(dft_err, e);
        }
    }
    MPI_Allreduce(MPI_IN_PLACE, &dft_err, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    fft6_run(&f, x, +1);

    MPI_Barrier(MPI_COMM_WORLD);
    comm_time = 0.0;
    double start = MPI_Wtime();
    for (int r = 0; r < reps; r++) {
        fft6_run(&f, x, -1);
        fft6_run(&f, x, +1);
    }
    double t = slowest(MPI_Wtime() - start) / (2.0 * reps);
    double comm = slowest(comm_time) / (2.0 * reps);
    /* After 1 + reps round trips the input must be back. */
    double err = 0.0;
    size_t worst = 0;
    for (size_t i = 0; i < f.local; i++) {
        double e = cabs(x[i] - orig[i]);
        if (e > err) {
            err = e;
            worst = i;
        }
    }
    err /= maxabs;
    if (!(err <= 1e-9)) {
        FAIL("forward then inverse: point %zu is %.12g%+.12gi, was %.12g%+.12gi (relative "
             "error %.3g)",
             first + worst, creal(x[worst]), cimag(x[worst]), creal(orig[worst]),
             cimag(orig[worst]), err);
    }
    MPI_Allreduce(MPI_IN_PLACE, &err, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
        double flops = 5.0 * (double) f.n * (double) log2n;
        printf("kernels: fft ranks=%d n=%zu n1=%zu n2=%zu reps=%d time_s=%.9f comm_s=%.9f "
               "gflops=%.4f roundtrip_err=%.3g dft_err=%.3g check=ok\n",
               nranks, f.n, f.n1, f.n2, 2 * reps, t, comm, flops / t / 1e9, err, dft_err);
        fflush(stdout);
    }
    plan_free(&f.p1);
    plan_free(&f.p2);
    free(f.tw);
    free(f.b);
    free(f.sbuf);
    free(f.rbuf);
    free(x);
    free(orig);
}

/* ---- radix sort ---------------------------------------------------------- */

struct keysum {
    uint64_t count, sum, xor, hashes;
};

static struct keysum keysum(const uint64_t *k, size_t n)
{
    struct keysum s = {n, 0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        s.sum += k[i];
        s.xor ^= k[i];
        s.hashes += mix64(k[i]);
    }
    uint64_t v[4] = {s.count, s.sum, s.xor, s.hashes}, r[4];
    /* count, sum and hashes add up mod 2^64 (MPI_SUM on uint64 wraps);
     * xor with MPI_BXOR. */
    MPI_Allreduce(v, r, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&v[2], &r[2], 1, MPI_UINT64_T, MPI_BXOR, MPI_COMM_WORLD);
    MPI_Allreduce(&v[3], &r[3], 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    return (struct keysum){r[0], r[1], r[2], r[3]};
}

/* Stable counting sort of `n` keys by digit (key >> shift) & mask into
 * `out`; `count` gets the digit histogram. */
static void counting_sort(const uint64_t *in, uint64_t *out, size_t n, int shift, uint64_t mask,
                          size_t *count, size_t *pos)
{
    const size_t radix = (size_t) mask + 1;
    memset(count, 0, radix * sizeof(size_t));
    for (size_t i = 0; i < n; i++) {
        count[(in[i] >> shift) & mask]++;
    }
    size_t at = 0;
    for (size_t d = 0; d < radix; d++) {
        pos[d] = at;
        at += count[d];
    }
    for (size_t i = 0; i < n; i++) {
        out[pos[(in[i] >> shift) & mask]++] = in[i];
    }
}

static void radix_sort(uint64_t *keys, uint64_t *tmp, size_t n, int bits, size_t *hist,
                       size_t *all, size_t *pos, int *scount, int *rcount, int *sdisp,
                       int *rdisp, int spoilt)
{
    const size_t radix = (size_t) 1 << bits;
    const uint64_t mask = radix - 1;
    const size_t total = n * (size_t) nranks;
    for (int shift = 0, pass = 0; shift < 64; shift += bits, pass++) {
        /* Local histogram, keys grouped by digit (stable). */
        counting_sort(keys, tmp, n, shift, mask, hist, pos);
        /* Every rank's histogram: where each digit's keys go globally. */
        double t0 = MPI_Wtime();
        MPI_Allgather(hist, (int) radix, MPI_UNSIGNED_LONG, all, (int) radix, MPI_UNSIGNED_LONG,
                      MPI_COMM_WORLD);
        comm_time += MPI_Wtime() - t0;
        /* Key i of my digit-d group has global position base[d] + (keys
         * with digit d on lower ranks) + i; the global array is split into
         * n keys per rank. */
        memset(scount, 0, sizeof(int) * (size_t) nranks);
        size_t base = 0;
        for (size_t d = 0; d < radix; d++) {
            size_t before = 0, digit_total = 0;
            for (int s = 0; s < nranks; s++) {
                size_t c = all[(size_t) s * radix + d];
                if (s < rank) {
                    before += c;
                }
                digit_total += c;
            }
            size_t from = base + before, to = from + hist[d];
            while (from < to) {
                size_t dest = from / n, end = (dest + 1) * n;
                size_t take = (end < to ? end : to) - from;
                scount[dest] += (int) take;
                from += take;
            }
            base += digit_total;
        }
        if (base != total) {
            FAIL("pass %d: the histograms add up to %zu keys, not %zu", pass, base, total);
        }
        t0 = MPI_Wtime();
        MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, MPI_COMM_WORLD);
        comm_time += MPI_Wtime() - t0;
        size_t got = 0;
        for (int r = 0; r < nranks; r++) {
            sdisp[r] = r ? sdisp[r - 1] + scount[r - 1] : 0;
            rdisp[r] = r ? rdisp[r - 1] + rcount[r - 1] : 0;
            got += (size_t) rcount[r];
        }
        if (got != n) {
            FAIL("pass %d: %zu keys to receive, not %zu", pass, got, n);
        }
        if (spoilt && pass == 3 && rank == 0) {
            tmp[0] ^= (uint64_t) 1 << 40;
        }
        t0 = MPI_Wtime();
        MPI_Alltoallv(tmp, scount, sdisp, MPI_UINT64_T, keys, rcount, rdisp, MPI_UINT64_T,
                      MPI_COMM_WORLD);
        comm_time += MPI_Wtime() - t0;
        /* Received in source order; a stable sort by the digit gives the
         * global order (digit, source, source's order) of this slice. */
        counting_sort(keys, tmp, n, shift, mask, hist, pos);
        memcpy(keys, tmp, n * sizeof(uint64_t));
    }
}

static void radix_keys(uint64_t *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        keys[i] = mix64(((uint64_t) rank << 40) ^ i ^ 0x5eed);
    }
}

static void kernel_radix(int log2k, int bits, int reps)
{
    current = "radix";
    const size_t n = (size_t) 1 << log2k;
    if (bits < 1 || bits > 16 || 64 % bits != 0) {
        FAIL("%d bits per digit: 1..16 dividing 64", bits);
    }
    if (n * (size_t) nranks > (size_t) 1 << 30) {
        FAIL("%zu keys: too many for int counts", n * (size_t) nranks);
    }
    const size_t radix = (size_t) 1 << bits;
    uint64_t *keys = xmalloc(n * sizeof(uint64_t)), *tmp = xmalloc(n * sizeof(uint64_t));
    size_t *hist = xmalloc(radix * sizeof(size_t)), *pos = xmalloc(radix * sizeof(size_t));
    size_t *all = xmalloc(radix * (size_t) nranks * sizeof(size_t));
    int *scount = xmalloc(4 * sizeof(int) * (size_t) nranks);
    int *rcount = scount + nranks, *sdisp = rcount + nranks, *rdisp = sdisp + nranks;
    _Static_assert(sizeof(size_t) == sizeof(unsigned long), "histograms as MPI_UNSIGNED_LONG");

    radix_keys(keys, n);
    const struct keysum before = keysum(keys, n);
    /* Warm-up sort (the spoiled one, with -C), checked like the others. */
    double t = 0.0, comm = 0.0;
    for (int r = 0; r <= reps; r++) {
        radix_keys(keys, n);
        MPI_Barrier(MPI_COMM_WORLD);
        comm_time = 0.0;
        double start = MPI_Wtime();
        radix_sort(keys, tmp, n, bits, hist, all, pos, scount, rcount, sdisp, rdisp,
                   spoil && r == 0);
        double elapsed = MPI_Wtime() - start;
        if (r > 0) {
            t += elapsed;
            comm += comm_time;
        }
        for (size_t i = 1; i < n; i++) {
            if (keys[i - 1] > keys[i]) {
                FAIL("rank's keys %zu and %zu out of order: %016llx > %016llx", i - 1, i,
                     (unsigned long long) keys[i - 1], (unsigned long long) keys[i]);
            }
        }
        /* My first key against the previous rank's last. */
        uint64_t prev_last = 0;
        MPI_Sendrecv(&keys[n - 1], 1, MPI_UINT64_T, (rank + 1) % nranks, 0, &prev_last, 1,
                     MPI_UINT64_T, (rank - 1 + nranks) % nranks, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        if (rank > 0 && prev_last > keys[0]) {
            FAIL("rank %d ends with %016llx, after it rank %d starts with %016llx", rank - 1,
                 (unsigned long long) prev_last, rank, (unsigned long long) keys[0]);
        }
        const struct keysum after = keysum(keys, n);
        if (memcmp(&before, &after, sizeof before) != 0) {
            FAIL("the keys changed: count %llu -> %llu, sum %016llx -> %016llx, xor %016llx -> "
                 "%016llx, hash sum %016llx -> %016llx",
                 (unsigned long long) before.count, (unsigned long long) after.count,
                 (unsigned long long) before.sum, (unsigned long long) after.sum,
                 (unsigned long long) before.xor, (unsigned long long) after.xor,
                 (unsigned long long) before.hashes, (unsigned long long) after.hashes);
        }
    }
    t = slowest(t) / reps;
    comm = slowest(comm) / reps;
    if (rank == 0) {
        printf("kernels: radix ranks=%d keys_per_rank=%zu digit_bits=%d passes=%d reps=%d "
               "time_s=%.9f comm_s=%.9f Mkeys_per_s=%.3f check=ok\n",
               nranks, n, bits, 64 / bits, reps, t, comm,
               (double) (n * (size_t) nranks) / t / 1e6);
        fflush(stdout);
    }
    free(keys);
    free(tmp);
    free(hist);
    free(pos);
    free(all);
    free(scount);
}

/* ---- small random updates ------------------------------------------------ */

#define UPD_RECVS 32 /* receives posted */
#define UPD_SENDS 64 /* sends in flight */

struct upd {
    uint64_t *table, table_words, global_words;
    int batch;
    uint64_t *rbuf, *sbuf;
    MPI_Request rreq[UPD_RECVS], sreq[UPD_SENDS];
    int sfree[UPD_SENDS], nfree;
    /* Per rank, this round: batches sent to it, batches received from it,
     * and how many it said it sent (-1 until its end message). */
    int *sent, *got, *announced;
    uint64_t applied; /* updates applied to my table */
    int first_send;   /* for -C */
};

/* Update `k` of rank `r` in round `round`. */
static uint64_t upd_value(int r, int round, uint64_t k)
{
    return mix64(((uint64_t) r << 48) ^ ((uint64_t) round << 40) ^ k);
}

static void upd_apply(struct upd *u, const uint64_t *v, int n, int src)
{
    for (int i = 0; i < n; i++) {
        uint64_t idx = v[i] % u->global_words;
        if (idx / u->table_words != (uint64_t) rank) {
            FAIL("rank %d sent update %016llx (word %llu) to rank %d", src,
                 (unsigned long long) v[i], (unsigned long long) idx, rank);
        }
        u->table[idx % u->table_words] ^= v[i];
    }
    u->applied += (uint64_t) n;
}

/* Apply what arrived and free completed sends, without blocking. A batch
 * is a multiple of 8 bytes; a sender's end message is one int of 4 bytes
 * (the number of batches it sent here this round). */
static void upd_progress(struct upd *u)
{
    int idx[UPD_RECVS > UPD_SENDS ? UPD_RECVS : UPD_SENDS], n;
    MPI_Status st[UPD_RECVS];
    MPI_Testsome(UPD_RECVS, u->rreq, &n, idx, st);
    for (int i = 0; i < n; i++) {
        int bytes, src = st[i].MPI_SOURCE;
        MPI_Get_count(&st[i], MPI_BYTE, &bytes);
        uint64_t *m = u->rbuf + (size_t) idx[i] * (size_t) u->batch;
        if (bytes == (int) sizeof(int)) {
            int said;
            memcpy(&said, m, sizeof said);
            if (u->announced[src] >= 0 || said < 0) {
                FAIL("rank %d ended twice or said it sent %d batches", src, said);
            }
            u->announced[src] = said;
        } else if (bytes % 8 == 0 && bytes > 0) {
            upd_apply(u, m, bytes / 8, src);
            u->got[src]++;
        } else {
            FAIL("a message of %d bytes from rank %d", bytes, src);
        }
        MPI_Irecv(m, 8 * u->batch, MPI_BYTE, MPI_ANY_SOURCE, TAG_UPD, MPI_COMM_WORLD,
                  &u->rreq[idx[i]]);
    }
    MPI_Testsome(UPD_SENDS, u->sreq, &n, idx, MPI_STATUSES_IGNORE);
    for (int i = 0; i < n; i++) {
        u->sfree[u->nfree++] = idx[i];
    }
}

/* Send `bytes` from `v` to `dest` (a batch, or an end message). */
static void upd_send(struct upd *u, int dest, const void *v, int bytes)
{
    while (u->nfree == 0) {
        upd_progress(u);
    }
    int slot = u->sfree[--u->nfree];
    uint64_t *m = u->sbuf + (size_t) slot * (size_t) u->batch;
    memcpy(m, v, (size_t) bytes);
    if (u->first_send && bytes >= 8) {
        u->first_send = 0;
        if (spoil && rank == 0) {
            m[0] ^= (uint64_t) 1 << 62;
        }
    }
    MPI_Isend(m, bytes, MPI_BYTE, dest, TAG_UPD, MPI_COMM_WORLD, &u->sreq[slot]);
}

static int upd_done(const struct upd *u)
{
    if (u->nfree < UPD_SENDS) {
        return 0;
    }
    for (int s = 0; s < nranks; s++) {
        if (s != rank && (u->announced[s] < 0 || u->got[s] != u->announced[s])) {
            return 0;
        }
    }
    return 1;
}

static void upd_round(struct upd *u, int round, uint64_t count, uint64_t *pending, int *npending)
{
    u->first_send = round == 0;
    for (int s = 0; s < nranks; s++) {
        u->sent[s] = u->got[s] = 0;
        u->announced[s] = -1;
    }
    for (uint64_t k = 0; k < count; k++) {
        uint64_t v = upd_value(rank, round, k);
        int dest = (int) ((v % u->global_words) / u->table_words);
        if (dest == rank) {
            upd_apply(u, &v, 1, rank);
        } else {
            uint64_t *p = pending + (size_t) dest * (size_t) u->batch;
            p[npending[dest]++] = v;
            if (npending[dest] == u->batch) {
                upd_send(u, dest, p, 8 * u->batch);
                u->sent[dest]++;
                npending[dest] = 0;
            }
        }
        if ((k & 15) == 15) {
            upd_progress(u);
        }
    }
    for (int d = 0; d < nranks; d++) {
        if (d == rank) {
            continue;
        }
        if (npending[d] > 0) {
            upd_send(u, d, pending + (size_t) d * (size_t) u->batch, 8 * npending[d]);
            u->sent[d]++;
            npending[d] = 0;
        }
        upd_send(u, d, &u->sent[d], (int) sizeof(int));
    }
    const double deadline = MPI_Wtime() + 120.0;
    while (!upd_done(u)) {
        upd_progress(u);
        if (MPI_Wtime() > deadline) {
            FAIL("round %d: not every rank's batches arrived within 120 s (%d sends in flight)",
                 round, UPD_SENDS - u->nfree);
        }
    }
}

static void kernel_updates(int log2u, int log2t, int batch, int reps)
{
    current = "updates";
    struct upd u;
    memset(&u, 0, sizeof u);
    u.table_words = (uint64_t) 1 << log2t;
    u.global_words = u.table_words * (uint64_t) nranks;
    u.batch = batch;
    u.table = xmalloc(u.table_words * 8);
    memset(u.table, 0, u.table_words * 8);
    u.rbuf = xmalloc((size_t) UPD_RECVS * (size_t) batch * 8);
    u.sent = xmalloc(3 * sizeof(int) * (size_t) nranks);
    u.got = u.sent + nranks;
    u.announced = u.got + nranks;
    u.sbuf = xmalloc((size_t) UPD_SENDS * (size_t) batch * 8);
    uint64_t *pending = xmalloc((size_t) nranks * (size_t) batch * 8);
    int *npending = xmalloc(sizeof(int) * (size_t) nranks);
    memset(npending, 0, sizeof(int) * (size_t) nranks);
    for (int i = 0; i < UPD_SENDS; i++) {
        u.sreq[i] = MPI_REQUEST_NULL;
        u.sfree[i] = i;
    }
    u.nfree = UPD_SENDS;
    for (int i = 0; i < UPD_RECVS; i++) {
        MPI_Irecv(u.rbuf + (size_t) i * (size_t) batch, 8 * batch, MPI_BYTE, MPI_ANY_SOURCE,
                  TAG_UPD, MPI_COMM_WORLD, &u.rreq[i]);
    }
    const uint64_t count = (uint64_t) 1 << log2u;
    /* Round 0 is the warm-up. */
    double t = 0.0;
    for (int r = 0; r <= reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        upd_round(&u, r, count, pending, npending);
        double elapsed = MPI_Wtime() - start;
        /* No rank may start the next round (and send into this round's
         * count) before all have ended this one. */
        MPI_Barrier(MPI_COMM_WORLD);
        if (r > 0) {
            t += elapsed;
        }
    }
    for (int i = 0; i < UPD_RECVS; i++) {
        MPI_Cancel(&u.rreq[i]);
        MPI_Wait(&u.rreq[i], MPI_STATUS_IGNORE);
    }
    /* Recompute my table from every rank's streams. */
    uint64_t *ref = xmalloc(u.table_words * 8);
    memset(ref, 0, u.table_words * 8);
    uint64_t mine = 0;
    for (int r = 0; r <= reps; r++) {
        for (int s = 0; s < nranks; s++) {
            for (uint64_t k = 0; k < count; k++) {
                uint64_t v = upd_value(s, r, k);
                uint64_t idx = v % u.global_words;
                if (idx / u.table_words == (uint64_t) rank) {
                    ref[idx % u.table_words] ^= v;
                    mine++;
                }
            }
        }
    }
    if (u.applied != mine) {
        FAIL("%llu updates applied, %llu were for this rank", (unsigned long long) u.applied,
             (unsigned long long) mine);
    }
    for (uint64_t i = 0; i < u.table_words; i++) {
        if (u.table[i] != ref[i]) {
            FAIL("table word %llu is %016llx, a recomputation gives %016llx",
                 (unsigned long long) i, (unsigned long long) u.table[i],
                 (unsigned long long) ref[i]);
        }
    }
    t = slowest(t) / reps;
    if (rank == 0) {
        double total = (double) count * nranks;
        /* Messages between ranks: (P-1)/P of the updates, batched. */
        double msgs = total * (nranks - 1) / nranks / batch;
        printf("kernels: updates ranks=%d updates_per_rank=%llu table_words=%llu batch=%d "
               "bytes=%d reps=%d time_s=%.9f Mupdates_per_s=%.3f msgs_per_s=%.0f check=ok\n",
               nranks, (unsigned long long) count, (unsigned long long) u.global_words, batch,
               8 * batch, reps, t, total / t / 1e6, msgs / t);
        fflush(stdout);
    }
    free(ref);
    free(u.table);
    free(u.rbuf);
    free(u.sbuf);
    free(u.sent);
    free(pending);
    free(npending);
}

/* ---- arguments ----------------------------------------------------------- */

static void usage(void)
{
    if (rank == 0) {
        fprintf(stderr,
                "usage: mpirun ... kernels KERNELS [-s SIZES] [-w WINDOW] [-V MIB] [-i ITERS] [-g KIB]\n"
                "         [-n LOG2N] [-k LOG2K] [-d BITS] [-u LOG2U] [-t LOG2T] [-b BATCH]\n"
                "         [-r REPS]\n"
                "KERNELS: all, or a comma-separated list of exchange, alltoall, transpose, fft,\n"
                "radix, updates\n");
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
            fprintf(stderr, "kernels: %s is not a number from %ld to %ld\n", s, min, max);
        }
        usage();
    }
    return v;
}

static const char *const NAMES[] = {"exchange", "alltoall", "transpose", "fft", "radix", "updates"};
#define NKERNELS (int) (sizeof NAMES / sizeof NAMES[0])

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    size_t sizes[MAX_SIZES] = {8, 4096, 65536, 1048576};
    int nsizes = 4, window = 1, log2n = 20, log2k = 20, bits = 8, log2u = 20, log2t = 16;
    int batch = 4, reps = 4;
    long volume = 64l << 20, max_iters = 2000, gap_kib = 0;
    int opt;
    while ((opt = getopt(argc, argv, "s:w:V:i:g:n:k:d:u:t:b:r:C")) != -1) {
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
            window = (int) number(optarg, 1, 1024);
            break;
        case 'V':
            volume = number(optarg, 1, 1l << 20) << 20;
            break;
        case 'i':
            max_iters = number(optarg, 5, 100000000);
            break;
        case 'g':
            gap_kib = number(optarg, 0, 1l << 22);
            break;
        case 'n':
            log2n = (int) number(optarg, 2, 28);
            break;
        case 'k':
            log2k = (int) number(optarg, 0, 26);
            break;
        case 'd':
            bits = (int) number(optarg, 1, 16);
            break;
        case 'u':
            log2u = (int) number(optarg, 0, 30);
            break;
        case 't':
            log2t = (int) number(optarg, 0, 28);
            break;
        case 'b':
            batch = (int) number(optarg, 1, 64);
            break;
        case 'r':
            reps = (int) number(optarg, 1, 100000);
            break;
        case 'C':
            spoil = 1;
            break;
        default:
            usage();
        }
    }
    if (optind + 1 != argc) {
        usage();
    }
    int run[NKERNELS] = {0};
    char *list = strdup(argv[optind]);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int found = 0;
        for (int k = 0; k < NKERNELS; k++) {
            if (strcmp(tok, "all") == 0 || strcmp(tok, NAMES[k]) == 0) {
                run[k] = found = 1;
            }
        }
        if (!found) {
            if (rank == 0) {
                fprintf(stderr, "kernels: no kernel %s\n", tok);
            }
            usage();
        }
    }
    free(list);
    if (64 % bits != 0) {
        if (rank == 0) {
            fprintf(stderr, "kernels: -d %d does not divide 64\n", bits);
        }
        usage();
    }

    if (run[0]) {
        kernel_exchange(sizes, nsizes, window, volume, max_iters);
    }
    if (run[1]) {
        kernel_alltoall(sizes, nsizes, volume, max_iters, gap_kib);
    }
    if (run[2]) {
        kernel_transpose(log2n, reps);
    }
    if (run[3]) {
        kernel_fft(log2n, reps);
    }
    if (run[4]) {
        kernel_radix(log2k, bits, reps);
    }
    if (run[5]) {
        kernel_updates(log2u, log2t, batch, reps);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("kernels: OK ranks=%d\n", nranks);
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
