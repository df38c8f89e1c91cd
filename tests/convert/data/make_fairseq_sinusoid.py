#!/usr/bin/python3
"""Writes fairseq_sinusoid_d32.json: rows of fairseq's sinusoidal position table computed by
torch, with fairseq's own code (fairseq/modules/sinusoidal_positional_embedding.py,
SinusoidalPositionalEmbedding.get_embedding), for tests/convert/fairseq_test.py to check
tools/convert/tnmt_model.fairseq_sinusoid against. Needs torch (Debian's interpreter has it:
deploy/install-deps.sh --dev), then:  /usr/bin/python3 tests/convert/data/make_fairseq_sinusoid.py
"""
import json
import math
import os

import torch


def get_embedding(num_embeddings, embedding_dim, padding_idx=None):  # fairseq's, verbatim math
    half_dim = embedding_dim // 2
    emb = math.log(10000) / (half_dim - 1)
    emb = torch.exp(torch.arange(half_dim, dtype=torch.float) * -emb)
    emb = torch.arange(num_embeddings, dtype=torch.float).unsqueeze(1) * emb.unsqueeze(0)
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(num_embeddings, -1)
    if embedding_dim % 2 == 1:
        emb = torch.cat([emb, torch.zeros(num_embeddings, 1)], dim=1)
    if padding_idx is not None:
        emb[padding_idx, :] = 0
    return emb


N, D, PAD = 1026, 32, 1  # 1024 positions after fairseq's offset of padding_idx + 1
table = get_embedding(N, D, PAD)
rows = [0, 1, 2, 3, 4, 10, 101, 500, 1025]
out = {"torch": torch.__version__, "num_embeddings": N, "embedding_dim": D, "padding_idx": PAD,
       "rows": {str(r): [float(x) for x in table[r].tolist()] for r in rows}}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fairseq_sinusoid_d32.json")
with open(path, "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
print("wrote", path)
