// How the tool fails. Exit codes: 0 success, 1 a failed check or a failed run, 2 a usage error
// (a bad flag, or a request this build or backend cannot serve).
#pragma once

#include <flashattn/flashattn.h>

#include <stdexcept>
#include <string>

namespace flashattn::cli {

constexpr int kExitSuccess = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// A flag or flag value the tool cannot accept; the message names the flag.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The library asked for something this build cannot do: that is the caller's request, not a bug.
inline int exit_code_for(fa_status status) {
    switch (status) {
        case FA_ERROR_INVALID_ARGUMENT:
        case FA_ERROR_UNSUPPORTED:
        case FA_ERROR_BACKEND_UNAVAILABLE: return kExitUsage;
        default: return kExitFailure;
    }
}

} // namespace flashattn::cli
