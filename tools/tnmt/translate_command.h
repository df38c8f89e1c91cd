// `tnmt translate`: translate lines of text with a model directory.
#pragma once

namespace tnmt::cli {

int TranslateCommand(int argc, char** argv);

}  // namespace tnmt::cli
