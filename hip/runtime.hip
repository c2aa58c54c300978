/*
 * runtime.hip - backend name, error strings and device selection for the C surface
 * (radiance_gpu.h). Host code only.
 */
#include "compat.h"
#include "radiance_gpu.h"

extern "C" const char *radiance_gpu_backend(void) { return RAD_BACKEND_NAME; }

extern "C" const char *radiance_gpu_error_string(int code)
{
    if (code == 0) return "no error";
    if (code == RADIANCE_GPU_EINVAL) return "invalid argument for a radiance GPU kernel";
    return rad_error_name((rad_error_t)code);
}

extern "C" int radiance_gpu_device_count(int *count)
{
    if (count == NULL) return RADIANCE_GPU_EINVAL;
    int n = 0;
    rad_error_t err = rad_get_device_count(&n);
    if (err != RAD_SUCCESS) {
        (void)rad_get_last_error(); /* a machine without a GPU is not an error state to keep */
        *count = 0;
        return (int)err;
    }
    *count = n;
    return 0;
}

extern "C" int radiance_gpu_get_device(int *device)
{
    if (device == NULL) return RADIANCE_GPU_EINVAL;
    return (int)rad_get_device(device);
}

extern "C" int radiance_gpu_set_device(int device)
{
    if (device < 0) return RADIANCE_GPU_EINVAL;
    return (int)rad_set_device(device);
}
