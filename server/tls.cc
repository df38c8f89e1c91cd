// See tls.h.
#include "server/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <sstream>

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "absl/strings/str_cat.h"

namespace tnmt::server {
namespace {

absl::Status ReadFile(const std::string& flag, const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, " ", path, ": cannot open (missing or unreadable)"));
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  if (out->empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": the file is empty"));
  return absl::OkStatus();
}

// OpenSSL's first queued error as text, and the queue cleared.
std::string SslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no PEM block of the expected kind";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<BIO, BioFree> Bio(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

}  // namespace

absl::Status CheckTlsFiles(const TlsFiles& f) {
  if (!f.enabled()) return absl::OkStatus();
  if (f.cert_file.empty() || f.key_file.empty()) {
    return absl::InvalidArgumentError(
        f.cert_file.empty() ? "--tls-key and --tls-client-ca need --tls-cert (the server's certificate)"
                            : "--tls-cert needs --tls-key (the certificate's private key)");
  }
  std::string cert_pem, key_pem;
  if (absl::Status s = ReadFile("--tls-cert", f.cert_file, &cert_pem); !s.ok()) return s;
  if (absl::Status s = ReadFile("--tls-key", f.key_file, &key_pem); !s.ok()) return s;
  ERR_clear_error();
  std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(Bio(cert_pem).get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-cert ", f.cert_file, ": not a PEM certificate (", SslError(), ")"));
  }
  std::unique_ptr<EVP_PKEY, KeyFree> key(PEM_read_bio_PrivateKey(Bio(key_pem).get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-key ", f.key_file,
                                                   ": not an unencrypted PEM private key (", SslError(), ")"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("--tls-key ", f.key_file,
                                                   ": does not match the certificate in --tls-cert ", f.cert_file));
  }
  if (!f.client_ca_file.empty()) {
    std::string ca_pem;
    if (absl::Status s = ReadFile("--tls-client-ca", f.client_ca_file, &ca_pem); !s.ok()) return s;
    std::unique_ptr<X509, X509Free> ca(PEM_read_bio_X509(Bio(ca_pem).get(), nullptr, nullptr, nullptr));
    if (ca == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-client-ca ", f.client_ca_file, ": no PEM certificate (", SslError(), ")"));
    }
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::ServerCredentials> GrpcServerCredentials(const TlsFiles& f) {
  if (!f.enabled()) return grpc::InsecureServerCredentials();
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      f.key_file, f.cert_file, f.client_ca_file, kTlsRefreshSeconds);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (f.client_ca_file.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

}  // namespace tnmt::server
