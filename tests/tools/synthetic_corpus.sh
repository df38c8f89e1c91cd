#!/usr/bin/env bash
# A synthetic parallel corpus for training tests: N "sentences" of 3-8 words over an
# 18-word vocabulary; the target is a word-by-word rewrite of the source into German-like
# words, so there is something to learn. Deterministic for a given SEED.
# Usage: synthetic_corpus.sh N SEED SOURCE_OUT TARGET_OUT
set -eu
awk -v n="$1" -v seed="$2" -v src="$3" -v tgt="$4" 'BEGIN {
  srand(seed); split("the a man woman dog cat runs sits on in red green big small house street ball child", w, " ");
  split("der ein Mann Frau Hund Katze rennt sitzt auf in rot gruen gross klein Haus Strasse Ball Kind", g, " ");
  for (i = 0; i < n; i++) { len = 3 + int(rand() * 6); s = ""; t = "";
    for (j = 0; j < len; j++) { k = 1 + int(rand() * 18); s = s (j ? " " : "") w[k]; t = t (j ? " " : "") g[k]; }
    print s > src; print t > tgt; } }'
