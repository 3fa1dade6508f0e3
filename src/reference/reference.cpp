#include "reference.h"
#include "core/error.h"
namespace flashattn::reference {
ForwardResult forward(const Problem&, Precision, bool) { fail(FA_ERROR_UNSUPPORTED, "reference not implemented yet"); }
Gradients backward(const BwdProblem&, Precision) { fail(FA_ERROR_UNSUPPORTED, "reference not implemented yet"); }
}
