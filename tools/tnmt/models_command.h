// `tnmt models`: the models a running `tnmt serve` serves (tnmt.v1.TranslationService/
// ListModels), as a table or, with --json, one JSON array.
#pragma once

namespace tnmt::cli {

int ModelsCommand(int argc, char** argv);

}  // namespace tnmt::cli
