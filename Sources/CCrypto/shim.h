// OpenSSL's EVP digest API and one-shot HMAC, for the SHA-256 of uploads, tus chunk checksums and webhook signatures (hardware-accelerated where the CPU has SHA extensions).
#ifndef TRANSCODERD_CCRYPTO_SHIM_H
#define TRANSCODERD_CCRYPTO_SHIM_H
#include <openssl/evp.h>
#include <openssl/hmac.h>
#endif
