// The decoding interface of the runtime, for programs built on it (the server): DecodeOptions
// and MaxOutputLength (engine/decode/options.h), the decoding-option table that checks a
// request's options (engine/decode/option_table.h), BeamDecoder for continuous batching
// (engine/decode/beam_search.h; NewBeamDecoder in loaded_model.h makes one for a model) and
// PairScore (engine/decode/score.h). engine/decode is private to the engine and the packages
// that build on its parts; these are the parts of it the runtime's users may name.
#pragma once

#include "engine/decode/beam_search.h"
#include "engine/decode/option_table.h"
#include "engine/decode/options.h"
#include "engine/decode/score.h"
