/*
 * Ping-pong between ranks 0 and 1, the same program under every MPI, for
 * comparing MPIs and their transports on one bed (NetPIPE is built for
 * Debian's Open MPI only):
 *
 *   mpi_latency [ROUND_TRIPS]   (default 20000)
 *
 * 8 bytes: a warm-up, then 7 batches of ROUND_TRIPS round trips; prints the
 * median batch's one-way time (half the round trip). 1 MiB: a warm-up, then
 * 7 batches of ROUND_TRIPS/100 round trips; prints the median batch's
 * one-way throughput (bytes over half the round trip, as NetPIPE counts it).
 * Every received buffer's first and last bytes are checked.
 *
 *   mpi_latency: 8 B one-way 2.345 us
 *   mpi_latency: 1048576 B one-way 1234.5 MB/s
 *   mpi_latency: OK
 *
 * Other ranks only wait at the final barrier.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCHES 7
#define BIG (1 << 20)

static int cmp(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

/* Seconds per round trip of `bytes`, the median of BATCHES batches of `n`. */
static double rounds(int rank, char *buf, int bytes, int n)
{
    double per[BATCHES];
    for (int b = -1; b < BATCHES; b++) {
        int count = b < 0 ? n / 10 + 1 : n;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < count; i++) {
            if (rank == 0) {
                buf[0] = (char) i;
                buf[bytes - 1] = (char) ~i;
                MPI_Send(buf, bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(buf, bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Recv(buf, bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
            }
            if (rank <= 1 && (buf[0] != (char) i || buf[bytes - 1] != (char) ~i)) {
                fprintf(stderr, "mpi_latency: rank %d: wrong data in round trip %d of %d B\n",
                        rank, i, bytes);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        if (b >= 0)
            per[b] = (MPI_Wtime() - t0) / count;
    }
    qsort(per, BATCHES, sizeof per[0], cmp);
    return per[BATCHES / 2];
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        fprintf(stderr, "usage: mpirun -np 2 mpi_latency [ROUND_TRIPS]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    if (n < 100)
        n = 100;
    char *buf = malloc(BIG);
    memset(buf, 0, BIG);
    double small = rounds(rank, buf, 8, n);
    double big = rounds(rank, buf, BIG, n / 100);
    if (rank == 0) {
        printf("mpi_latency: 8 B one-way %.3f us\n", small / 2 * 1e6);
        printf("mpi_latency: %d B one-way %.1f MB/s\n", BIG, BIG / (big / 2) / 1e6);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_latency: OK\n");
    free(buf);
    MPI_Finalize();
    return 0;
}
