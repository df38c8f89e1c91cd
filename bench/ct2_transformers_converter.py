#!/usr/bin/env python3
"""CTranslate2's own `ct2-transformers-converter` (ctranslate2.converters.transformers.main, the
same arguments), run under the older transformers that build/py-hf pins (4.38.2, over Debian's
torch), for bench/run_opus_bench.sh:

    PYTHONPATH=DIR_WITH_CTRANSLATE2 build/py-hf/bin/python3 bench/ct2_transformers_converter.py \
        --model HF_DIR --output_dir CT2_DIR [--quantization int8] [--force]

ctranslate2 4.8.5's converter passes `from_pretrained(..., dtype=...)`, the keyword's name since
transformers 4.56; 4.38 calls it `torch_dtype` and hands an unknown `dtype` to the model's
constructor, which refuses it. The one change made here is that keyword's name; the conversion
itself is CTranslate2's. build/py-tools has ctranslate2 but not transformers, build/py-hf the
reverse; the caller puts ctranslate2 (alone, not py-tools' numpy) on PYTHONPATH.
"""

import sys

from ctranslate2.converters import transformers as ct2_transformers


def load_model(self, model_class, model_name_or_path, **kwargs):
    if "dtype" in kwargs:
        kwargs["torch_dtype"] = kwargs.pop("dtype")
    return model_class.from_pretrained(model_name_or_path, **kwargs)


if __name__ == "__main__":
    ct2_transformers.TransformersConverter.load_model = load_model
    sys.argv[0] = "ct2-transformers-converter"
    sys.exit(ct2_transformers.main())
