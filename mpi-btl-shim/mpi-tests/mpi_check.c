/*
 * An MPI test program for btl/llc (any MPI and BTL would do): point-to-point
 * from 0 B to 16 MiB with the data checked, ANY_SOURCE/ANY_TAG, non-blocking
 * with Waitall, MPI_Probe, and collectives with their results checked.
 *
 *   mpi_check            run every check; rank 0 prints "mpi_check: OK ..."
 *   mpi_check kill R     rank R kills itself (SIGKILL) after a barrier while
 *                        the others exchange messages with it: they must
 *                        end with an error in bounded time, not hang
 *   mpi_check threads T  MPI_THREAD_MULTIPLE: T threads per rank exchange
 *                        messages of 0 B to 256 KiB with the partner rank's
 *                        threads at once (tag = thread), data checked
 */
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank, size;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "mpi_check: rank %d: FAILED: ", rank);                                     \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        MPI_Abort(MPI_COMM_WORLD, 2);                                                              \
    } while (0)

static uint8_t pattern(int src, int dst, size_t len, size_t i)
{
    uint64_t x = (uint64_t) src * 0x9E3779B97F4A7C15ull ^ (uint64_t) dst * 0xC2B2AE3D27D4EB4Full ^
                 (uint64_t) len * 0x165667B19E3779F9ull ^ (uint64_t) i * 0x27D4EB2F165667C5ull;
    x ^= x >> 29;
    return (uint8_t) (x ^ (x >> 8));
}

static void fill(uint8_t *b, int src, int dst, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        b[i] = pattern(src, dst, len, i);
    }
}

static void check(const uint8_t *b, int src, int dst, size_t len, const char *what)
{
    for (size_t i = 0; i < len; i++) {
        if (b[i] != pattern(src, dst, len, i)) {
            FAIL("%s: %zu bytes from %d to %d: byte %zu is %u, expected %u", what, len, src, dst, i,
                 b[i], pattern(src, dst, len, i));
        }
    }
}

/* Every size from 0 to 16 MiB (powers of two and their neighbours), rank 0
 * with every other rank, both directions. */
static void pingpong_sizes(void)
{
    const size_t max = 16u << 20;
    uint8_t *buf = malloc(max + 1);
    size_t sizes[128];
    int n = 0;
    sizes[n++] = 0;
    for (size_t s = 1; s <= max; s *= 2) {
        if (s > 2) {
            sizes[n++] = s - 1;
        }
        sizes[n++] = s;
        if (s < max && s > 1) {
            sizes[n++] = s + 1;
        }
    }
    for (int peer = 1; peer < size; peer++) {
        for (int k = 0; k < n; k++) {
            size_t len = sizes[k];
            MPI_Status st;
            int count;
            if (rank == 0) {
                fill(buf, 0, peer, len);
                MPI_Send(buf, (int) len, MPI_BYTE, peer, 100 + k, MPI_COMM_WORLD);
                memset(buf, 0, len);
                MPI_Recv(buf, (int) max, MPI_BYTE, peer, 100 + k, MPI_COMM_WORLD, &st);
                MPI_Get_count(&st, MPI_BYTE, &count);
                if ((size_t) count != len) {
                    FAIL("echo of %zu bytes from %d has %d", len, peer, count);
                }
                check(buf, peer, 0, len, "pingpong reply");
            } else if (rank == peer) {
                memset(buf, 0, len);
                MPI_Recv(buf, (int) max, MPI_BYTE, 0, 100 + k, MPI_COMM_WORLD, &st);
                MPI_Get_count(&st, MPI_BYTE, &count);
                if ((size_t) count != len) {
                    FAIL("message of %zu bytes from 0 has %d", len, count);
                }
                check(buf, 0, peer, len, "pingpong");
                fill(buf, peer, 0, len);
                MPI_Send(buf, (int) len, MPI_BYTE, 0, 100 + k, MPI_COMM_WORLD);
            }
        }
    }
    free(buf);
    if (rank == 0) {
        printf("mpi_check: point-to-point 0 B..16 MiB (%d sizes) with %d peers: ok\n", n,
               size - 1);
    }
}

static void any_source_any_tag(void)
{
    const size_t len = 1000;
    uint8_t buf[1000];
    if (rank == 0) {
        int seen = 0;
        for (int i = 1; i < size; i++) {
            MPI_Status st;
            int count;
            MPI_Recv(buf, sizeof(buf), MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_BYTE, &count);
            if (st.MPI_TAG != 7 * st.MPI_SOURCE + 3 || (size_t) count != len) {
                FAIL("ANY_SOURCE/ANY_TAG: source %d tag %d count %d", st.MPI_SOURCE, st.MPI_TAG,
                     count);
            }
            check(buf, st.MPI_SOURCE, 0, len, "ANY_SOURCE");
            seen |= 1 << st.MPI_SOURCE;
        }
        if (seen != ((1 << size) - 2)) {
            FAIL("ANY_SOURCE: senders seen %#x", seen);
        }
        printf("mpi_check: ANY_SOURCE/ANY_TAG: ok\n");
    } else {
        fill(buf, rank, 0, len);
        MPI_Send(buf, (int) len, MPI_BYTE, 0, 7 * rank + 3, MPI_COMM_WORLD);
    }
    /* Nothing else may be sent before rank 0's wildcard receives are done. */
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Everyone sends to everyone with Isend/Irecv, a small and a large message
 * per pair, then Waitall. */
static void nonblocking_all_pairs(void)
{
    const size_t small = 3000, large = (1u << 20) + 17;
    int nreq = 0;
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * 4 * size);
    uint8_t **bufs = calloc(4 * size, sizeof(uint8_t *));
    for (int p = 0; p < size; p++) {
        if (p == rank) {
            continue;
        }
        size_t lens[2] = {small, large};
        for (int j = 0; j < 2; j++) {
            uint8_t *r = malloc(lens[j]);
            bufs[nreq] = r;
            MPI_Irecv(r, (int) lens[j], MPI_BYTE, p, 50 + j, MPI_COMM_WORLD, &reqs[nreq++]);
        }
        for (int j = 0; j < 2; j++) {
            uint8_t *s = malloc(lens[j]);
            fill(s, rank, p, lens[j]);
            bufs[nreq] = s;
            MPI_Isend(s, (int) lens[j], MPI_BYTE, p, 50 + j, MPI_COMM_WORLD, &reqs[nreq++]);
        }
    }
    MPI_Waitall(nreq, reqs, MPI_STATUSES_IGNORE);
    int k = 0;
    for (int p = 0; p < size; p++) {
        if (p == rank) {
            continue;
        }
        check(bufs[k], p, rank, small, "Irecv small");
        check(bufs[k + 1], p, rank, large, "Irecv large");
        for (int j = 0; j < 4; j++) {
            free(bufs[k + j]);
        }
        k += 4;
    }
    free(bufs);
    free(reqs);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("mpi_check: Isend/Irecv all pairs + Waitall: ok\n");
    }
}

static void probe(void)
{
    if (rank == 0) {
        for (int i = 1; i < size; i++) {
            MPI_Status st;
            int count;
            MPI_Probe(MPI_ANY_SOURCE, 77, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_BYTE, &count);
            if ((size_t) count != 5000u * (size_t) st.MPI_SOURCE + 1) {
                FAIL("Probe: %d bytes from %d", count, st.MPI_SOURCE);
            }
            uint8_t *b = malloc(count);
            MPI_Recv(b, count, MPI_BYTE, st.MPI_SOURCE, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            check(b, st.MPI_SOURCE, 0, count, "Probe");
            free(b);
        }
        printf("mpi_check: MPI_Probe: ok\n");
    } else {
        size_t len = 5000u * (size_t) rank + 1;
        uint8_t *b = malloc(len);
        fill(b, rank, 0, len);
        MPI_Send(b, (int) len, MPI_BYTE, 0, 77, MPI_COMM_WORLD);
        free(b);
    }
}

static void collectives(void)
{
    /* bcast, large and small, from two roots */
    const size_t big = 4u << 20;
    uint8_t *b = malloc(big);
    for (int root = 0; root < size; root += size - 1) {
        if (rank == root) {
            fill(b, root, -1, big);
        } else {
            memset(b, 0, big);
        }
        MPI_Bcast(b, (int) big, MPI_BYTE, root, MPI_COMM_WORLD);
        check(b, root, -1, big, "Bcast");
        int v = rank == root ? 4242 + root : 0;
        MPI_Bcast(&v, 1, MPI_INT, root, MPI_COMM_WORLD);
        if (v != 4242 + root) {
            FAIL("Bcast int: %d", v);
        }
        if (size == 1) {
            break;
        }
    }
    free(b);

    /* reduce and allreduce */
    enum { N = 100000 };
    long *in = malloc(sizeof(long) * N), *out = malloc(sizeof(long) * N);
    for (int i = 0; i < N; i++) {
        in[i] = (long) rank * i + 1;
    }
    long ranksum = (long) size * (size - 1) / 2;
    MPI_Reduce(in, out, N, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int i = 0; i < N; i++) {
            if (out[i] != ranksum * i + size) {
                FAIL("Reduce[%d] = %ld", i, out[i]);
            }
        }
    }
    MPI_Allreduce(in, out, N, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < N; i++) {
        if (out[i] != ranksum * i + size) {
            FAIL("Allreduce[%d] = %ld", i, out[i]);
        }
    }
    double d = rank + 0.5, dmax;
    MPI_Allreduce(&d, &dmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (dmax != size - 0.5) {
        FAIL("Allreduce max = %f", dmax);
    }
    free(in);
    free(out);

    /* alltoall: block j from rank i holds i*1000+j, for two block sizes */
    for (int blk = 1; blk <= 40000; blk *= 200) {
        int *s = malloc(sizeof(int) * blk * size), *r = malloc(sizeof(int) * blk * size);
        for (int j = 0; j < size; j++) {
            for (int k = 0; k < blk; k++) {
                s[j * blk + k] = rank * 1000000 + j * 1000 + k % 1000;
            }
        }
        MPI_Alltoall(s, blk, MPI_INT, r, blk, MPI_INT, MPI_COMM_WORLD);
        for (int i = 0; i < size; i++) {
            for (int k = 0; k < blk; k++) {
                if (r[i * blk + k] != i * 1000000 + rank * 1000 + k % 1000) {
                    FAIL("Alltoall block %d from %d element %d = %d", blk, i, k, r[i * blk + k]);
                }
            }
        }
        free(s);
        free(r);
    }
    for (int i = 0; i < 100; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 0) {
        printf("mpi_check: Bcast, Reduce, Allreduce, Alltoall, Barrier: ok\n");
    }
}

static int kill_test(int victim)
{
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == victim) {
        fprintf(stderr, "mpi_check: rank %d: killing myself\n", rank);
        fflush(stderr);
        raise(SIGKILL);
    }
    /* Keep exchanging with the victim: a send/receive towards it must fail
     * (or the job be torn down) in bounded time. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char buf[4096] = {0};
    for (long i = 0;; i++) {
        int rc = MPI_Sendrecv(buf, sizeof(buf), MPI_BYTE, victim, 1, buf, sizeof(buf), MPI_BYTE,
                              victim, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            char msg[MPI_MAX_ERROR_STRING];
            int len;
            MPI_Error_string(rc, msg, &len);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            fprintf(stderr, "mpi_check: rank %d: MPI error after %.1f s: %s\n", rank,
                    (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9, msg);
            return 3;
        }
    }
}

#define MAX_THREADS 16
#define THREAD_ITERS 300

/* One thread of the THREAD_MULTIPLE check: Sendrecv with the same thread of
 * the partner rank (tag = thread), sizes cycling from 0 B to 256 KiB (eager
 * and rendezvous), both directions checked. */
static void *thread_main(void *arg)
{
    int t = (int) (intptr_t) arg;
    int partner = rank ^ 1;
    static const size_t sizes[] = {0, 1, 8, 100, 4096, 32768, 65536, 262144};
    const size_t n = sizeof(sizes) / sizeof(sizes[0]);
    uint8_t *out = malloc(262144), *in = malloc(262144);
    for (int i = 0; i < THREAD_ITERS; i++) {
        size_t len = sizes[(i + t) % n];
        fill(out, rank * MAX_THREADS + t, partner * MAX_THREADS + t, len);
        MPI_Status st;
        int rc = MPI_Sendrecv(out, (int) len, MPI_BYTE, partner, t, in, (int) len, MPI_BYTE,
                              partner, t, MPI_COMM_WORLD, &st);
        if (rc != MPI_SUCCESS) {
            FAIL("thread %d: Sendrecv returned %d", t, rc);
        }
        int got;
        MPI_Get_count(&st, MPI_BYTE, &got);
        if ((size_t) got != len || st.MPI_TAG != t) {
            FAIL("thread %d: got %d bytes with tag %d, expected %zu with tag %d", t, got,
                 st.MPI_TAG, len, t);
        }
        check(in, partner * MAX_THREADS + t, rank * MAX_THREADS + t, len, "thread exchange");
    }
    free(out);
    free(in);
    return NULL;
}

static int threads_test(int nthreads)
{
    if (size % 2 != 0 || nthreads < 1 || nthreads > MAX_THREADS) {
        fprintf(stderr, "mpi_check: threads needs an even number of ranks and 1..%d threads\n",
                MAX_THREADS);
        return 1;
    }
    double t0 = MPI_Wtime();
    pthread_t th[MAX_THREADS];
    for (int t = 0; t < nthreads; t++) {
        pthread_create(&th[t], NULL, thread_main, (void *) (intptr_t) t);
    }
    for (int t = 0; t < nthreads; t++) {
        pthread_join(th[t], NULL);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("mpi_check: OK threads=%d ranks=%d time=%.2fs\n", nthreads, size, MPI_Wtime() - t0);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 2 && 0 == strcmp(argv[1], "threads")) {
        int provided;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        if (provided < MPI_THREAD_MULTIPLE) {
            fprintf(stderr, "mpi_check: MPI_THREAD_MULTIPLE not provided (level %d)\n", provided);
            MPI_Abort(MPI_COMM_WORLD, 4);
        }
        int rc = threads_test(atoi(argv[2]));
        if (rc != 0) {
            MPI_Abort(MPI_COMM_WORLD, rc);
        }
        MPI_Finalize();
        return 0;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 2 && 0 == strcmp(argv[1], "kill")) {
        int rc = kill_test(atoi(argv[2]));
        MPI_Abort(MPI_COMM_WORLD, rc);
        return rc;
    }
    if (size < 2) {
        fprintf(stderr, "mpi_check: needs at least 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double t0 = MPI_Wtime();
    pingpong_sizes();
    any_source_any_tag();
    nonblocking_all_pairs();
    probe();
    collectives();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("mpi_check: OK ranks=%d time=%.2fs\n", size, MPI_Wtime() - t0);
    }
    MPI_Finalize();
    return 0;
}
