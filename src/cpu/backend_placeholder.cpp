#include "core/backend.h"
#include "core/error.h"
namespace flashattn::cpu {
void forward(const Problem&) { fail(FA_ERROR_UNSUPPORTED, "CPU forward not implemented yet"); }
void backward(const BwdProblem&) { fail(FA_ERROR_UNSUPPORTED, "CPU backward not implemented yet"); }
void set_num_threads(int) {}
int num_threads() { return 1; }
}
