// `tnmt shortlist`: builds a vocabulary shortlist file (engine/model/shortlist.h) for a model
// from a line-aligned parallel corpus, tokenized with the model's own SentencePiece
// (engine/model/shortlist_builder.h estimates it); `tnmt translate --shortlist FILE` uses it.
#pragma once

namespace tnmt::cli {

int ShortlistCommand(int argc, char** argv);

}  // namespace tnmt::cli
