// Internal error reporting: throw flashattn::Error with a message naming the argument; the C ABI
// boundary (api.cpp) turns it into a status code and fa_last_error().
#pragma once

#include <flashattn/flashattn.hpp>

#include <sstream>
#include <string>
#include <utility>

namespace flashattn {

template <typename... Parts>
[[noreturn]] void fail(fa_status status, Parts&&... parts) {
    std::ostringstream message;
    (message << ... << std::forward<Parts>(parts));
    throw Error(status, message.str());
}

// require(condition, "q.row_stride must be >= 0, got ", value);
template <typename... Parts>
void require(bool condition, Parts&&... parts) {
    if (!condition) fail(FA_ERROR_INVALID_ARGUMENT, std::forward<Parts>(parts)...);
}

} // namespace flashattn
