// TLS for the server's gRPC port: the certificate files a user names (`tnmt serve --tls-cert
// --tls-key [--tls-client-ca]`), checked with OpenSSL before anything binds so that a wrong file
// is a start-up error naming the file and the problem, and gRPC server credentials that watch
// the files: replaced certificates are served to new connections within a second
// (kTlsRefreshSeconds). With a client CA, clients must present a certificate signed by it
// (mutual TLS); without one, none is asked for.
#pragma once

#include <memory>
#include <string>

#include <grpcpp/security/server_credentials.h>

#include "absl/status/status.h"

namespace tnmt::server {

struct TlsFiles {
  std::string cert_file;       // PEM: the server's certificate chain, leaf first
  std::string key_file;        // PEM: its private key
  std::string client_ca_file;  // PEM: CA certificates that client certificates must chain to; "": no client certificates
  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !client_ca_file.empty(); }
};

// How often gRPC rereads the files (seconds).
constexpr unsigned kTlsRefreshSeconds = 1;

// OK when TLS is off (no file named) or when: both the certificate and the key are named, each
// reads and parses as PEM, the key belongs to the certificate, and the client CA file (if
// named) holds at least one certificate. Errors are INVALID_ARGUMENT (or NOT_FOUND for a file
// that cannot be read) and start with the flag: "--tls-key /x/key.pem: does not match the
// certificate in --tls-cert /x/cert.pem".
absl::Status CheckTlsFiles(const TlsFiles& files);

// Credentials for grpc::ServerBuilder::AddListeningPort: insecure when TLS is off, else TLS
// over the watched files (call CheckTlsFiles first).
std::shared_ptr<grpc::ServerCredentials> GrpcServerCredentials(const TlsFiles& files);

}  // namespace tnmt::server
