// `tnmt import` and `tnmt export`: moving models between tnmt's model directory and the
// Hugging Face Marian (OPUS-MT) layout (docs/model-import-export.md).
#pragma once

namespace tnmt::cli {

int ImportCommand(int argc, char** argv);
int ExportCommand(int argc, char** argv);

}  // namespace tnmt::cli
