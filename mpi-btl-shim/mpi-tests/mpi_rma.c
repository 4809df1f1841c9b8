/*
 * MPI one-sided communication, checked: every rank exposes a window of
 * 1 MiB; with fences, each rank puts a pattern into its right neighbour's
 * window (small and large pieces) and gets a range of its left
 * neighbour's back; then the same under passive-target locks. Rank 0
 * prints "mpi_rma: OK ranks=N" when every byte is right.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WIN (1 << 20)

static int rank, size;

static uint8_t pattern(int owner, size_t i, int round)
{
    return (uint8_t) (owner * 31 + i * 7 + round * 13 + (i >> 8));
}

static void fail(const char *what, size_t i, unsigned got, unsigned want)
{
    fprintf(stderr, "mpi_rma: rank %d: FAILED: %s: byte %zu is %u, expected %u\n", rank, what, i,
            got, want);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    uint8_t *base;
    MPI_Win win;
    MPI_Win_allocate(WIN, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    uint8_t *src = malloc(WIN), *dst = malloc(WIN);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    size_t sizes[] = {8, 1000, 65536, WIN};
    for (int round = 0; round < 4; round++) {
        size_t len = sizes[round];
        /* Active target: fences around a put into the right neighbour. */
        memset(base, 0, WIN);
        for (size_t i = 0; i < len; i++) {
            src[i] = pattern(rank, i, round);
        }
        MPI_Win_fence(0, win);
        MPI_Put(src, (int) len, MPI_BYTE, right, 0, (int) len, MPI_BYTE, win);
        MPI_Win_fence(0, win);
        for (size_t i = 0; i < len; i++) {
            if (base[i] != pattern(left, i, round)) {
                fail("put (fence)", i, base[i], pattern(left, i, round));
            }
        }
        /* Get back what the left neighbour holds (its left's pattern). */
        MPI_Get(dst, (int) len, MPI_BYTE, left, 0, (int) len, MPI_BYTE, win);
        MPI_Win_fence(0, win);
        int lefts_left = (left + size - 1) % size;
        for (size_t i = 0; i < len; i++) {
            if (dst[i] != pattern(lefts_left, i, round)) {
                fail("get (fence)", i, dst[i], pattern(lefts_left, i, round));
            }
        }
        /* Passive target: lock, put at an offset, unlock. */
        MPI_Barrier(MPI_COMM_WORLD);
        size_t off = (len > 64 && len < WIN) ? 17 : 0, n = len - off;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win);
        MPI_Put(src, (int) n, MPI_BYTE, right, (MPI_Aint) off, (int) n, MPI_BYTE, win);
        MPI_Win_unlock(right, win);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win);
        for (size_t i = 0; i < n; i++) {
            if (base[off + i] != pattern(left, i, round)) {
                fail("put (lock)", off + i, base[off + i], pattern(left, i, round));
            }
        }
        MPI_Win_unlock(rank, win);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Win_free(&win);
    free(src);
    free(dst);
    if (rank == 0) {
        printf("mpi_rma: OK ranks=%d\n", size);
    }
    MPI_Finalize();
    return 0;
}
