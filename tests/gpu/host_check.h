// The CHECK macro of the host-side index-math checks (layout_check.cu, bwd_layout_check.cu): a
// failed condition is counted and the first 20 are printed; main() returns non-zero if any failed.
#pragma once

#include <cstdio>

static int failures = 0;
#define CHECK(cond, ...)                                         \
    do {                                                         \
        if (!(cond)) {                                           \
            if (failures++ < 20) {                               \
                std::printf("FAIL %s:%d: ", __FILE__, __LINE__); \
                std::printf(__VA_ARGS__);                        \
                std::printf("\n");                               \
            }                                                    \
        }                                                        \
    } while (0)
