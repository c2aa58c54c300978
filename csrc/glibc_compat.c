/*
 * glibc_compat.c - keeps the CUDA build's glibc floor at 2.34 (the wheel's manylinux_2_34 tag:
 * Ubuntu 22.04, Debian 12, RHEL 9; docs/install.md).
 *
 * A CUDA build links libstdc++ statically (setup.py). Its string instantiations pull in
 * std::random_device, which radiance never calls, and that object refers to arc4random, a glibc
 * 2.36 symbol on a machine whose glibc has it: the extension would then need glibc 2.36 (not on
 * Ubuntu 22.04, which vLLM's images use) for a function it never runs. This hidden definition,
 * over getrandom (glibc 2.25), answers that reference inside the extension instead. It is
 * compiled into CUDA builds only (setup.py), and is never exported.
 */
#include <stdint.h>
#include <sys/random.h>
#include <sys/types.h>

__attribute__((visibility("hidden"))) uint32_t arc4random(void);

uint32_t arc4random(void)
{
    uint32_t value = 0;
    while (getrandom(&value, sizeof value, 0) != (ssize_t)sizeof value) {
        /* interrupted before the pool was ready: ask again */
    }
    return value;
}
