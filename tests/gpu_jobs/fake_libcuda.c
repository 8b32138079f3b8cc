/* A stand-in for the CUDA driver's wait, for the CPU lab test (tests/test_watch_gpuwait_lab.py): built
 * as libcuda.so.1, it exports cuStreamSynchronize, which spins reading the clock as the real driver does
 * while it waits for the device under its default schedule (gdb stacks of real hangs end in libcuda.so.1
 * at clock_gettime@plt: rwth-i6/returnn#1811). Only the GPU is missing here; the process, its Python
 * stack, the kernel's perf samples and py-spy's native unwinding are real.
 * fake_set_wait(s): how long the next cuStreamSynchronize waits, in seconds; < 0: for ever. */
#include <time.h>

static volatile double wait_s = 0.0;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void fake_set_wait(double s) { wait_s = s; }

int cuStreamSynchronize(void *stream) {
    (void)stream;
    double end = now() + wait_s;
    while (wait_s < 0 || now() < end) {
    }
    return 0; /* CUDA_SUCCESS */
}
