"""tnmt-client: a typed Python client for a running `tnmt serve`.

    from tnmt_client import Client
    with Client("localhost:50051") as c:
        for t in c.translate(["A man rides a bike."], beam_size=4, return_scores=True):
            print(t.text, t.hypotheses[0].score)
"""

from tnmt_client.client import DEFAULT, Client, Hypothesis, PairScore, Translation, decoding_options
from tnmt_client.errors import TnmtError
from tnmt_client._proto.tnmt.v1 import training_pb2, translation_pb2

__all__ = ["DEFAULT", "Client", "Hypothesis", "PairScore", "Translation", "TnmtError", "decoding_options",
           "training_pb2", "translation_pb2"]
__version__ = "0.1.0"
