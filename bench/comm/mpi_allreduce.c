/*
 * The OpenMPI baseline of `kiln comm-bench allreduce`: MPI_Allreduce (sum, fp32,
 * out-of-place) over a range of sizes, printing the same columns as comm-bench (size, count,
 * type, redop, root, time, algbw, busbw, #wrong) so bench/comm/compare.sh parses both alike.
 *
 *   mpirun -np N mpi_allreduce [-b 8] [-e 256M] [-f 2] [-n 20] [-w 5] [-c 1]
 *
 * time is the per-iteration average of n blocking calls after w warm-up ones, slowest rank;
 * busbw = algbw * 2(n-1)/n as in nccl-tests.
 */
#include <ctype.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_size(const char* text, uint64_t* out) {
  char* end = NULL;
  unsigned long long v = strtoull(text, &end, 10);
  if (end == text) return 0;
  int shift = 0;
  if (*end) {
    char c = (char)toupper((unsigned char)*end);
    shift = c == 'K' ? 10 : c == 'M' ? 20 : c == 'G' ? 30 : -1;
    if (shift < 0) return 0;
    ++end;
    if (*end == 'B' || *end == 'b') ++end;
    if (*end) return 0;
  }
  *out = (uint64_t)v << shift;
  return 1;
}

/* Element i of rank r: a small integer, so sums are exact in fp32. */
static float value(int rank, uint64_t i) { return (float)((i * 7 + (uint64_t)rank * 5) % 13); }

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  uint64_t lo = 8, hi = 256u << 20, factor = 2;
  int iters = 20, warmup = 5, check = 0;
  for (int a = 1; a < argc; ++a) {
    const char* v = a + 1 < argc ? argv[a + 1] : NULL;
    int ok = v != NULL;
    if (ok && strcmp(argv[a], "-b") == 0)
      ok = parse_size(v, &lo);
    else if (ok && strcmp(argv[a], "-e") == 0)
      ok = parse_size(v, &hi);
    else if (ok && strcmp(argv[a], "-f") == 0)
      ok = parse_size(v, &factor) && factor >= 2;
    else if (ok && strcmp(argv[a], "-n") == 0)
      ok = (iters = atoi(v)) >= 1;
    else if (ok && strcmp(argv[a], "-w") == 0)
      ok = (warmup = atoi(v)) >= 0;
    else if (ok && strcmp(argv[a], "-c") == 0)
      ok = (check = atoi(v)) == 0 || check == 1;
    else
      ok = 0;
    if (!ok) {
      if (rank == 0)
        fprintf(stderr,
                "mpi_allreduce: bad argument '%s' (usage: -b SIZE -e SIZE -f N -n N -w N -c 0|1)\n",
                argv[a]);
      MPI_Finalize();
      return 2;
    }
    ++a;
  }
  if (lo > hi) {
    if (rank == 0) fprintf(stderr, "mpi_allreduce: -b is larger than -e\n");
    MPI_Finalize();
    return 2;
  }
  uint64_t max_count = hi / sizeof(float);
  /* Page-aligned like Kiln's device memory: on some CPUs (AMD Zen here) memcpy is many times
   * slower when source and destination differ by 1..63 bytes modulo 4 KiB, which malloc's
   * 16-byte offset and MPI's page-aligned shared memory would give. */
  size_t bytes = ((max_count + 1) * sizeof(float) + 4095) / 4096 * 4096;
  float* send = aligned_alloc(4096, bytes);
  float* recv = aligned_alloc(4096, bytes);
  if (!send || !recv) {
    fprintf(stderr, "mpi_allreduce: rank %d: out of memory for %llu bytes\n", rank,
            (unsigned long long)hi);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (uint64_t i = 0; i < max_count; ++i) send[i] = value(rank, i);
  memset(recv, 0, bytes);
  if (rank == 0) {
    printf(
        "# mpi_allreduce (OpenMPI MPI_Allreduce): %d ranks, fp32 sum, %d iterations after %d "
        "warm-up\n#\n",
        nranks, iters, warmup);
    printf("# %12s %12s %7s %6s %5s %11s %8s %8s %7s\n", "size", "count", "type", "redop", "root",
           "time", "algbw", "busbw", "#wrong");
    printf("# %12s %12s %7s %6s %5s %11s %8s %8s %7s\n", "(B)", "(elements)", "", "", "", "(us)",
           "(GB/s)", "(GB/s)", "");
    fflush(stdout);
  }
  long long total_wrong = 0;
  /* As kiln comm-bench (and nccl-tests): the warm-up iterations at the largest size first. */
  for (int i = 0; i < warmup; ++i)
    MPI_Allreduce(send, recv, (int)max_count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (uint64_t bytes = lo;; bytes *= factor) {
    int count = (int)(bytes / sizeof(float));
    for (int i = 0; i < warmup; ++i)
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < iters; ++i)
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double us = (MPI_Wtime() - start) * 1e6 / iters, us_max = 0;
    MPI_Reduce(&us, &us_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    long long wrong = 0, wrong_sum = 0;
    if (check) {
      for (int i = 0; i < count; ++i) {
        float expect = 0;
        for (int r = 0; r < nranks; ++r) expect += value(r, (uint64_t)i);
        if (recv[i] != expect) ++wrong;
      }
    }
    MPI_Reduce(&wrong, &wrong_sum, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      uint64_t size = (uint64_t)count * sizeof(float);
      double algbw = us_max > 0 ? (double)size / (us_max * 1e3) : 0;
      double busbw = algbw * 2.0 * (nranks - 1) / nranks;
      printf("  %12llu %12d %7s %6s %5d %11.2f %8.2f %8.2f %7lld\n", (unsigned long long)size,
             count, "fp32", "sum", -1, us_max, algbw, busbw, wrong_sum);
      fflush(stdout);
    }
    total_wrong += wrong_sum;
    if (bytes == 0 || bytes > hi / factor) break;
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return total_wrong == 0 ? 0 : 1;
}
