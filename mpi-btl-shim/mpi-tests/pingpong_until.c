/*
 * An MPI job that keeps running until told to stop, for tests that watch a
 * live job from outside (llc-stat): ranks 0 and 1 exchange 8-byte messages
 * until the file STOPFILE exists (rank 0 looks every 100 round trips) or
 * MAX_SECONDS pass, then end normally.
 *
 *   pingpong_until STOPFILE [MAX_SECONDS [READYFILE]]   (default 120)
 *
 * Rank 0 prints "pingpong_until: running" after the first round trip (and
 * creates READYFILE, when given, for a watcher that cannot read the job's
 * output while it runs) and "pingpong_until: OK round_trips=N" at the end;
 * other ranks only wait.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2 || size < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np 2 pingpong_until STOPFILE [MAX_SECONDS]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *stopfile = argv[1];
    double max_seconds = argc > 2 ? atof(argv[2]) : 120.0;
    const char *readyfile = argc > 3 ? argv[3] : NULL;
    /* msg[0]: 1 while running, 0 to stop; msg[1]: round trip number. */
    uint32_t msg[2] = {1, 0};
    uint64_t trips = 0;
    double start = MPI_Wtime();
    if (rank == 0) {
        for (;;) {
            msg[1] = (uint32_t) trips;
            if (trips % 100 == 0 &&
                (access(stopfile, F_OK) == 0 || MPI_Wtime() - start > max_seconds))
                msg[0] = 0;
            MPI_Send(msg, 2, MPI_UINT32_T, 1, 0, MPI_COMM_WORLD);
            if (msg[0] == 0)
                break;
            MPI_Recv(msg, 2, MPI_UINT32_T, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (msg[1] != (uint32_t) trips) {
                fprintf(stderr, "pingpong_until: echo %u for round trip %llu\n", msg[1],
                        (unsigned long long) trips);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
            if (++trips == 1) {
                printf("pingpong_until: running\n");
                fflush(stdout);
                if (readyfile) {
                    FILE *f = fopen(readyfile, "w");
                    if (f)
                        fclose(f);
                }
            }
        }
    } else if (rank == 1) {
        for (;;) {
            MPI_Recv(msg, 2, MPI_UINT32_T, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (msg[0] == 0)
                break;
            MPI_Send(msg, 2, MPI_UINT32_T, 0, 0, MPI_COMM_WORLD);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("pingpong_until: OK round_trips=%llu\n", (unsigned long long) trips);
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
