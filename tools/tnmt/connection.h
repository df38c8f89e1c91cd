// How the client commands (translate/score --server, models, jobs, health) reach a server:
// the TLS flags shared by all of them, and the translation API's bearer token.
//   --tls              TLS with the system's root certificates
//   --tls-ca FILE      TLS trusting the CA certificates in FILE (PEM); implies --tls
//   --tls-cert FILE    client certificate (PEM) for servers that require one (mutual TLS);
//   --tls-key FILE     with its private key; both or neither; imply --tls
//   --tls-server-name  the name the server's certificate must carry, when it differs from
//                      the host in --server (e.g. --server 10.0.0.5:50051 --tls-server-name tnmt)
// Files are read when the command starts: a missing or empty one is an error naming the flag.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "tools/tnmt/args.h"

namespace tnmt::cli {

void AddTlsFlags(Args* args);

// Credentials from the flags AddTlsFlags added (insecure when none is given). `args` is
// adjusted: --tls-server-name becomes GRPC_SSL_TARGET_NAME_OVERRIDE_ARG in `channel_args`.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsCredentialsFromFlags(const Args& args,
                                                                                   grpc::ChannelArguments* channel_args);

// A bearer token read from the file that --`flag` names, else from the file $`env` names
// (surrounding whitespace dropped); "" when neither is given. An unreadable file is NOT_FOUND
// naming where its name came from; an empty one is "" or, with required_nonempty,
// INVALID_ARGUMENT.
absl::StatusOr<std::string> TokenFromFlag(const Args& args, const std::string& flag, const char* env,
                                          bool required_nonempty);

// The translation API's token flag: --token-file FILE (else $TNMT_API_TOKEN_FILE).
void AddApiTokenFlag(Args* args);
// The token read from that file, or "" when neither is given.
absl::StatusOr<std::string> ApiTokenFromFlags(const Args& args);

// A channel to `target` with the TLS flags applied.
absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectFromFlags(const Args& args, const std::string& target,
                                                                grpc::ChannelArguments channel_args = {});

}  // namespace tnmt::cli
