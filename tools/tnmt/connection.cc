// See connection.h.
#include "tools/tnmt/connection.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tnmt::cli {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--", flag, " ", path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", path, ": not a PEM file (no -----BEGIN line)"));
  }
  return ss.str();
}

}  // namespace

void AddTlsFlags(Args* args) {
  args->AddBool("tls", false, "connect over TLS, trusting the system's root certificates");
  args->AddString("tls-ca", "", "connect over TLS, trusting the CA certificates in this PEM file", "none");
  args->AddString("tls-cert", "", "client certificate (PEM) for servers that require one; with --tls-key", "none");
  args->AddString("tls-key", "", "private key (PEM) of --tls-cert", "none");
  args->AddString("tls-server-name", "", "name the server's certificate must carry", "the host in --server");
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsCredentialsFromFlags(const Args& args,
                                                                                   grpc::ChannelArguments* channel_args) {
  const std::string ca = args.GetString("tls-ca"), cert = args.GetString("tls-cert"), key = args.GetString("tls-key");
  const std::string server_name = args.GetString("tls-server-name");
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError(cert.empty() ? "--tls-key needs --tls-cert" : "--tls-cert needs --tls-key");
  }
  const bool tls = args.GetBool("tls") || !ca.empty() || !cert.empty() || !server_name.empty();
  if (!tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!ca.empty()) {
    absl::StatusOr<std::string> pem = ReadPem("tls-ca", ca);
    if (!pem.ok()) return pem.status();
    ssl.pem_root_certs = *pem;
  }
  if (!cert.empty()) {
    absl::StatusOr<std::string> c = ReadPem("tls-cert", cert);
    if (!c.ok()) return c.status();
    absl::StatusOr<std::string> k = ReadPem("tls-key", key);
    if (!k.ok()) return k.status();
    ssl.pem_cert_chain = *c;
    ssl.pem_private_key = *k;
  }
  if (!server_name.empty()) channel_args->SetSslTargetNameOverride(server_name);
  return grpc::SslCredentials(ssl);
}

void AddApiTokenFlag(Args* args) {
  args->AddString("token-file", "", "file with the bearer token of a server started with --api-token-file",
                  "$TNMT_API_TOKEN_FILE, else none");
}

absl::StatusOr<std::string> TokenFromFlag(const Args& args, const std::string& flag, const char* env, bool required_nonempty) {
  std::string path = args.GetString(flag);
  std::string source = absl::StrCat("--", flag, " ");  // where the file's name came from, for errors
  if (!args.given(flag) && std::getenv(env) != nullptr) {
    path = std::getenv(env);
    source = absl::StrCat(env, "=");
  }
  if (path.empty()) return std::string();
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(source, path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(ss.str()));
  if (token.empty() && required_nonempty) {
    return absl::InvalidArgumentError(absl::StrCat(source, path, ": the file is empty"));
  }
  return token;
}

absl::StatusOr<std::string> ApiTokenFromFlags(const Args& args) {
  return TokenFromFlag(args, "token-file", "TNMT_API_TOKEN_FILE", /*required_nonempty=*/true);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectFromFlags(const Args& args, const std::string& target,
                                                                grpc::ChannelArguments channel_args) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = TlsCredentialsFromFlags(args, &channel_args);
  if (!creds.ok()) return creds.status();
  return grpc::CreateCustomChannel(target, *creds, channel_args);
}

}  // namespace tnmt::cli
