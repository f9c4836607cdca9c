/* MPI peer for Reducer's side-by-side all-reduce benchmark.
 *
 * Built by bench/run_bench.py with mpicc into a temporary directory and run
 * under mpirun (TCP over loopback). For every size in --sizes it runs
 * --warmup untimed and --iters timed MPI_Allreduce(float, MPI_SUM) calls back
 * to back (no barrier between iterations, as in a training loop), timing each
 * call with CLOCK_MONOTONIC. With --metric_sync it instead times
 * MPI_Allreduce of 2 doubles (16 bytes).
 *
 * Rank 0 prints one JSON line per size on stdout, in the format every worker
 * of the benchmark shares:
 *   {"system": "mpi", "world_size": W, "size_bytes": N, "latencies_us": [...]}
 * (metric sync adds "pattern": "metric_sync").
 *
 * Flags: --sizes=4,16,... --iters=N --warmup=M [--metric_sync]
 * (also accepted as "--flag value"). Rank and world size come from MPI.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZES 64

struct options {
  long sizes[MAX_SIZES];
  int num_sizes;
  int iters;  /* -1: default */
  int warmup; /* -1: default */
  int metric_sync;
};

/* Prints a message to stderr and aborts the whole MPI job. */
static void die(const char* msg) {
  fprintf(stderr, "mpi_allreduce: %s\n", msg);
  MPI_Abort(MPI_COMM_WORLD, 2);
  exit(2);
}

/* Parses "4,16,64" into opts->sizes; each must be a positive multiple of 4. */
static void parse_sizes(const char* text, struct options* opts) {
  char* copy = strdup(text);
  opts->num_sizes = 0;
  for (char* tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
    long n = strtol(tok, NULL, 10);
    if (n <= 0 || n % 4 != 0) die("sizes must be positive multiples of 4 bytes");
    if (opts->num_sizes == MAX_SIZES) die("too many sizes");
    opts->sizes[opts->num_sizes++] = n;
  }
  free(copy);
}

/* Returns the value of flag `name` in argv[*i] ("--name=v" or "--name v"),
 * advancing *i past a separate value; NULL if argv[*i] is another flag. */
static const char* flag_value(int argc, char** argv, int* i, const char* name) {
  size_t len = strlen(name);
  if (strncmp(argv[*i], name, len) != 0) return NULL;
  if (argv[*i][len] == '=') return argv[*i] + len + 1;
  if (argv[*i][len] == '\0' && *i + 1 < argc) return argv[++*i];
  return NULL;
}

/* Fills opts from the command line and applies the defaults. */
static void parse_args(int argc, char** argv, struct options* opts) {
  memset(opts, 0, sizeof(*opts));
  opts->iters = opts->warmup = -1;
  parse_sizes("4", opts);
  for (int i = 1; i < argc; ++i) {
    const char* v;
    if (strcmp(argv[i], "--metric_sync") == 0) {
      opts->metric_sync = 1;
    } else if ((v = flag_value(argc, argv, &i, "--sizes"))) {
      parse_sizes(v, opts);
    } else if ((v = flag_value(argc, argv, &i, "--iters"))) {
      opts->iters = atoi(v);
    } else if ((v = flag_value(argc, argv, &i, "--warmup"))) {
      opts->warmup = atoi(v);
    } else {
      die("unknown flag (expected --sizes, --iters, --warmup, --metric_sync)");
    }
  }
  if (opts->iters < 0) opts->iters = opts->metric_sync ? 1000 : 100;
  if (opts->warmup < 0) opts->warmup = opts->iters / 10 > 0 ? opts->iters / 10 : 1;
}

/* Monotonic time in microseconds. */
static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Runs warmup + iters MPI_Allreduce(SUM) calls of `count` elements and stores
 * the timed ones' latencies (us) in lat. Out of place: send holds ones, and
 * the result is checked to be world_size at both ends. */
static void time_allreduce(void* send, void* recv, int count, MPI_Datatype type,
                           int iters, int warmup, double* lat) {
  for (int i = 0; i < warmup + iters; ++i) {
    double t0 = now_us();
    MPI_Allreduce(send, recv, count, type, MPI_SUM, MPI_COMM_WORLD);
    double t1 = now_us();
    if (i >= warmup) lat[i - warmup] = t1 - t0;
  }
  int world;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  double first, last;
  if (type == MPI_FLOAT) {
    first = ((float*)recv)[0];
    last = ((float*)recv)[count - 1];
  } else {
    first = ((double*)recv)[0];
    last = ((double*)recv)[count - 1];
  }
  if (first != world || last != world) die("wrong MPI_Allreduce result");
}

/* Prints one result line (call on rank 0 only). */
static void emit(int world, long size_bytes, int metric_sync, const double* lat,
                 int n) {
  printf("{\"system\": \"mpi\", \"world_size\": %d, \"size_bytes\": %ld, ", world,
         size_bytes);
  if (metric_sync) printf("\"pattern\": \"metric_sync\", ");
  printf("\"latencies_us\": [");
  for (int i = 0; i < n; ++i) printf(i ? ", %.3f" : "%.3f", lat[i]);
  printf("]}\n");
  fflush(stdout);
}

/* Allocates a buffer of `count` elements of `type`, all set to one. */
static void* alloc_ones(long count, MPI_Datatype type) {
  size_t elem = type == MPI_FLOAT ? sizeof(float) : sizeof(double);
  void* p = malloc(count * elem > 0 ? count * elem : 1);
  if (!p) die("out of memory");
  for (long i = 0; i < count; ++i) {
    if (type == MPI_FLOAT) ((float*)p)[i] = 1.0f;
    else ((double*)p)[i] = 1.0;
  }
  return p;
}

/* Times one pattern (a float32 size or the metric sync) and prints it. */
static void run_one(long size_bytes, MPI_Datatype type, int metric_sync,
                    const struct options* opts, int rank, int world) {
  long elem = type == MPI_FLOAT ? sizeof(float) : sizeof(double);
  long count = size_bytes / elem;
  void* send = alloc_ones(count, type);
  void* recv = alloc_ones(count, type);
  double* lat = calloc(opts->iters > 0 ? opts->iters : 1, sizeof(double));
  MPI_Barrier(MPI_COMM_WORLD); /* align ranks before this size, untimed */
  time_allreduce(send, recv, (int)count, type, opts->iters, opts->warmup, lat);
  if (rank == 0) emit(world, size_bytes, metric_sync, lat, opts->iters);
  free(lat);
  free(recv);
  free(send);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  struct options opts;
  parse_args(argc, argv, &opts);
  if (opts.metric_sync) {
    run_one(2 * sizeof(double), MPI_DOUBLE, 1, &opts, rank, world);
  } else {
    for (int s = 0; s < opts.num_sizes; ++s)
      run_one(opts.sizes[s], MPI_FLOAT, 0, &opts, rank, world);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
