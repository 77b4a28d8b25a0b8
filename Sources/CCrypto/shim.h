// OpenSSL's EVP digest API, for the SHA-256 of uploads and tus chunk checksums (hardware-accelerated where the CPU has SHA extensions).
#ifndef TRANSCODERD_CCRYPTO_SHIM_H
#define TRANSCODERD_CCRYPTO_SHIM_H
#include <openssl/evp.h>
#endif
