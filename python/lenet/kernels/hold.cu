// hold.cu: hold_ns keeps its stream busy for `ns` nanoseconds of the GPU's global timer.
//   Used only to time kernels alone (backends/_device_timing.py): while it runs, the host enqueues
//   a whole launch sequence with an event pair around each launch, so no host launch gap falls
//   between the events of a pair. Launch geometry: grid 1, block 1. Needs sm_70 (__nanosleep).
extern "C" __global__ void hold_ns(unsigned long long ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
