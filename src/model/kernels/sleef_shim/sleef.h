#pragma once
// Declarations of the SLEEF functions that ATen's AVX2 at::vec headers call (Debian ships
// libsleef3, the runtime LibTorch links, but not libsleef-dev with sleef.h). Only the kernels
// library sees this directory (src/model/CMakeLists.txt), and only when it builds for AVX2.
// Signatures as SLEEF 3.5 declares them (const-qualified returns: ATen takes their addresses).
#include <immintrin.h>
extern "C" {
typedef struct { __m256 x, y; } Sleef___m256_2;
typedef struct { __m256d x, y; } Sleef___m256d_2;
typedef struct { __m128 x, y; } Sleef___m128_2;
const __m256d Sleef_acosd4_u10(__m256d);
const __m128 Sleef_acosf4_u10(__m128);
const __m256 Sleef_acosf8_u10(__m256);
const __m256d Sleef_asind4_u10(__m256d);
const __m128 Sleef_asinf4_u10(__m128);
const __m256 Sleef_asinf8_u10(__m256);
const __m256d Sleef_atan2d4_u10(__m256d, __m256d);
const __m128 Sleef_atan2f4_u10(__m128, __m128);
const __m256 Sleef_atan2f8_u10(__m256, __m256);
const __m256d Sleef_atand4_u10(__m256d);
const __m128 Sleef_atanf4_u10(__m128);
const __m256 Sleef_atanf8_u10(__m256);
const __m256d Sleef_copysignd4(__m256d, __m256d);
const __m128 Sleef_copysignf4(__m128, __m128);
const __m256 Sleef_copysignf8(__m256, __m256);
const __m256d Sleef_cosd4_u10(__m256d);
const __m128 Sleef_cosf4_u10(__m128);
const __m256 Sleef_cosf8_u10(__m256);
const __m256d Sleef_coshd4_u10(__m256d);
const __m128 Sleef_coshf4_u10(__m128);
const __m256 Sleef_coshf8_u10(__m256);
const __m256d Sleef_erfcd4_u15(__m256d);
const __m128 Sleef_erfcf4_u15(__m128);
const __m256 Sleef_erfcf8_u15(__m256);
const __m256d Sleef_erfd4_u10(__m256d);
const __m128 Sleef_erff4_u10(__m128);
const __m256 Sleef_erff8_u10(__m256);
const __m256d Sleef_expd4_u10(__m256d);
const __m128 Sleef_expf4_u10(__m128);
const __m256 Sleef_expf8_u10(__m256);
const __m256d Sleef_expm1d4_u10(__m256d);
const __m128 Sleef_expm1f4_u10(__m128);
const __m256 Sleef_expm1f8_u10(__m256);
const __m256d Sleef_fmodd4(__m256d, __m256d);
const __m128 Sleef_fmodf4(__m128, __m128);
const __m256 Sleef_fmodf8(__m256, __m256);
const __m256d Sleef_hypotd4_u05(__m256d, __m256d);
const __m128 Sleef_hypotf4_u05(__m128, __m128);
const __m256 Sleef_hypotf8_u05(__m256, __m256);
const __m256d Sleef_lgammad4_u10(__m256d);
const __m128 Sleef_lgammaf4_u10(__m128);
const __m256 Sleef_lgammaf8_u10(__m256);
const __m256d Sleef_log10d4_u10(__m256d);
const __m128 Sleef_log10f4_u10(__m128);
const __m256 Sleef_log10f8_u10(__m256);
const __m256d Sleef_log1pd4_u10(__m256d);
const __m128 Sleef_log1pf4_u10(__m128);
const __m256 Sleef_log1pf8_u10(__m256);
const __m256d Sleef_log2d4_u10(__m256d);
const __m128 Sleef_log2f4_u10(__m128);
const __m256 Sleef_log2f8_u10(__m256);
const __m256d Sleef_logd4_u10(__m256d);
const __m128 Sleef_logf4_u10(__m128);
const __m256 Sleef_logf8_u10(__m256);
const __m256d Sleef_nextafterd4(__m256d, __m256d);
const __m128 Sleef_nextafterf4(__m128, __m128);
const __m256 Sleef_nextafterf8(__m256, __m256);
const __m256d Sleef_powd4_u10(__m256d, __m256d);
const __m128 Sleef_powf4_u10(__m128, __m128);
const __m256 Sleef_powf8_u10(__m256, __m256);
const Sleef___m256d_2 Sleef_sincosd4_u10(__m256d);
const Sleef___m256_2 Sleef_sincosf8_u10(__m256);
const __m256d Sleef_sind4_u10(__m256d);
const __m128 Sleef_sinf4_u10(__m128);
const __m256 Sleef_sinf8_u10(__m256);
const __m256d Sleef_sinhd4_u10(__m256d);
const __m128 Sleef_sinhf4_u10(__m128);
const __m256 Sleef_sinhf8_u10(__m256);
const __m256d Sleef_tand4_u10(__m256d);
const __m128 Sleef_tanf4_u10(__m128);
const __m256 Sleef_tanf8_u10(__m256);
const __m256d Sleef_tanhd4_u10(__m256d);
const __m128 Sleef_tanhf4_u10(__m128);
const __m256 Sleef_tanhf8_u10(__m256);
// Also referenced by LibTorch 2.x's at::vec headers (tools/torch2-compile-check.sh):
const __m256d Sleef_acoshd4_u10(__m256d);
const __m256 Sleef_acoshf8_u10(__m256);
const __m256d Sleef_atanhd4_u10(__m256d);
const __m256 Sleef_atanhf8_u10(__m256);
const __m256 Sleef_cosf8_u35(__m256);
const __m256d Sleef_exp2d4_u10(__m256d);
const __m256 Sleef_exp2f8_u10(__m256);
const __m256 Sleef_sinf8_u35(__m256);
// Also referenced by LibTorch 2.14's (Vectorized<float/double>::asinh; in libsleef3 since 3.0):
const __m256d Sleef_asinhd4_u10(__m256d);
const __m256 Sleef_asinhf8_u10(__m256);
}
