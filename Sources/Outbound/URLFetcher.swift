import Crypto
import Foundation
import Glibc

/// Downloads a URL into a new file, hashing it (SHA-256) on the way: an input given by URL instead of uploaded.
/// Follows at most 5 redirects, holds every connection to the address policy, and stops at the size limit, the
/// total timeout and a stall (no byte, or under 1 KiB a second, for the stall timeout). On any failure the file is
/// removed: nothing is left behind. Blocks the calling thread.
public struct URLFetcher: Sendable {
    public let policy: AddressPolicy
    /// Bytes accepted at most.
    public let maxBytes: Int64
    /// Seconds the whole download may take.
    public let timeout: Double
    /// Seconds without a byte after which it stops.
    public let stallTimeout: Double
    /// Bytes a second it needs on average over every `stallTimeout` once the body has begun, else it stops as
    /// stalled: a server trickling a byte now and then would otherwise hold a fetch for the whole `timeout`.
    public let minimumRate: Int64

    public init(policy: AddressPolicy, maxBytes: Int64, timeout: Double = 3600, stallTimeout: Double = 30, minimumRate: Int64 = 1024) {
        self.policy = policy
        self.maxBytes = maxBytes
        self.timeout = timeout
        self.stallTimeout = stallTimeout
        self.minimumRate = minimumRate
    }

    /// What was downloaded.
    public struct Fetched: Sendable {
        public let size: Int64
        /// Lowercase hex.
        public let sha256: String
        /// From `Content-Disposition`, else the URL's last path component (not sanitised: never a path).
        public let filename: String?
        public let contentType: String?
    }

    /// Downloads `url` to `path` (created exclusively). `progress` hears bytes so far and the expected total when the
    /// server said it; returning false cancels.
    public func fetch(_ url: String, to path: String, progress: ((Int64, Int64?) -> Bool)? = nil) throws(OutboundError) -> Fetched {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o640)
        guard descriptor >= 0 else {
            // The file's name, not where the server keeps its data: the message reaches API clients.
            let name = path.split(separator: "/").last.map(String.init) ?? path
            throw Self.storageError("Creating the download file \(name)", errno: errno)
        }
        var closed = false
        defer { if !closed { close(descriptor) } }
        let digest = Digest()
        let request = OutboundRequest(url: url, maxRedirects: 5, timeout: timeout, stallTimeout: stallTimeout,
                                      minimumRate: minimumRate, maxBytes: maxBytes)
        do throws(OutboundError) {
            let response = try CurlTransfer().perform(request, policy: policy, sink: { bytes in
                var offset = 0
                while offset < bytes.count {
                    let count = write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                    if count < 0 && errno == EINTR { continue }
                    guard count > 0 else { return Self.storageError("Writing the download", errno: errno) }
                    offset += count
                }
                digest.update(bytes)
                return nil
            }, progress: progress)
            guard (200..<300).contains(response.status) else {
                let wait = [429, 503].contains(response.status)
                    ? HTTPDate.retryAfter(response.header("retry-after"), now: Date().timeIntervalSince1970) : nil
                throw OutboundError(code: "http_status", message: "The server answered \(response.status) for the URL.",
                                    status: response.status, retryAfter: wait)
            }
            closed = true
            guard close(descriptor) == 0 else { throw Self.storageError("Writing the download", errno: errno) }
            return Fetched(size: response.bytes, sha256: digest.finish(),
                           // Named after where the redirects led: a link shortener's or a signed-URL endpoint's
                           // path (`/redirect`, `/download`) said nothing of the file.
                           filename: Self.filename(disposition: response.header("content-disposition"), url: response.url),
                           contentType: response.header("content-type"))
        } catch {
            unlink(path)
            throw error
        }
    }

    /// A failure of this machine's disk: `no_space` when it is full (or the quota spent), as for an upload sent in a
    /// request's body (507), `storage_error` otherwise.
    static func storageError(_ what: String, errno code: Int32) -> OutboundError {
        let full = code == ENOSPC || code == EDQUOT
        return OutboundError(code: full ? "no_space" : "storage_error", message: "\(what) failed: \(String(cString: strerror(code))).")
    }

    /// `url` as it is fetched or posted to, when it may be: an absolute http or https URL with a host, at most 2048
    /// bytes, no space or control character in it, its port (if given) 1 to 65535. What libcurl refuses must be
    /// refused here: a webhook URL with a line break or port 99999 was accepted, and each delivery then failed with
    /// `invalid_url` through its whole retry schedule (41.6 hours); an input URL so failed its job only once it ran.
    /// As given when it is ASCII, else in its ASCII form (the host in IDNA, `xn--…`; the rest percent-encoded), which
    /// libcurl reads without a locale. Given as it was, a host such as `éxample.com` was accepted and every fetch or
    /// delivery failed as `invalid_url`.
    public static func fetchable(_ url: String) -> String? {
        if url.utf8.allSatisfy({ $0 < 0x80 }) { return isASCIIFetchable(url) ? url : nil }
        guard url.utf8.count <= 2048, let ascii = asciiForm(url), isASCIIFetchable(ascii) else { return nil }
        return ascii
    }

    /// `url` with its host in IDNA and every other byte outside ASCII percent-encoded; what is ASCII already
    /// (escapes `%XX` included) stays as it is. (URLComponents encodes a part again whole, `%20` becoming `%2520`:
    /// a signed URL's query, or a path with a space, then named something else.) Nil without `://`, with an unclosed bracket, or a host IDNA
    /// cannot take.
    static func asciiForm(_ url: String) -> String? {
        // A slice of `url`: its indices are the URL's own.
        guard let found = hostText(url) else { return nil }
        var host = String(found)
        if !host.utf8.allSatisfy({ $0 < 0x80 }) {
            guard let idna = URLComponents(string: "http://" + host)?.string?.dropFirst("http://".count),
                  !idna.isEmpty, idna.utf8.allSatisfy({ $0 < 0x80 }) else { return nil }
            host = String(idna)
        }
        let encoded = { (part: Substring) -> String in
            var text = ""
            for byte in part.utf8 {
                if byte < 0x80 { text.unicodeScalars.append(Unicode.Scalar(byte)) } else { text += String(format: "%%%02X", byte) }
            }
            return text
        }
        return encoded(url[..<found.startIndex]) + host + encoded(url[found.endIndex...])
    }

    private static func isASCIIFetchable(_ url: String) -> Bool {
        guard url.utf8.count <= 2048, !url.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7f }),
              let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
              scheme == "http" || scheme == "https", let host = components.host, !host.isEmpty else { return false }
        // A host libcurl takes: in brackets an IPv6 address (it refuses `[1.2.3.4]`, `[v1.x]`), else no
        // percent-encoding (`ex%2Fample.com`).
        guard let hostText = hostText(url) else { return false }
        if hostText.hasPrefix("[") {
            let address = hostText.dropFirst().dropLast().prefix { $0 != "%" }
            guard address.contains(":"), IPAddress(String(address)) != nil else { return false }
        } else if hostText.contains("%") {
            return false
        }
        // From the text itself: past Int's range URLComponents gives no port at all, and its ranges index the
        // string it made (percent-encoded, IDNA), not this one.
        guard let port = portText(url) else { return false }
        if !port.isEmpty {
            guard port.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let number = Int(port),
                  (1...65535).contains(number) else { return false }
        }
        return true
    }

    /// The host and port of an absolute URL's text: its authority after `://`, up to the path, query or fragment,
    /// after any user information; nil for no `://`.
    private static func hostAndPort(_ url: String) -> Substring? {
        guard let start = url.range(of: "://") else { return nil }
        let authority = url[start.upperBound...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        guard let at = authority.lastIndex(of: "@") else { return authority }
        return authority[authority.index(after: at)...]
    }

    /// The host an absolute URL's text names (an IPv6 address with its brackets); nil for no `://` or an unclosed
    /// bracket.
    static func hostText(_ url: String) -> Substring? {
        guard let host = hostAndPort(url) else { return nil }
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return nil }
            return host[...close]
        }
        return host.prefix { $0 != ":" }
    }

    /// The port an absolute URL's text names ("" for none), read from its authority: after `://`, up to the path,
    /// query or fragment, after any user information, past an IPv6 address's brackets; nil for no `://`.
    static func portText(_ url: String) -> Substring? {
        guard let host = hostAndPort(url) else { return nil }
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return nil }
            let after = host[host.index(after: close)...]
            return after.hasPrefix(":") ? after.dropFirst() : after.isEmpty ? "" : nil
        }
        guard let colon = host.lastIndex(of: ":") else { return "" }
        return host[host.index(after: colon)...]
    }

    /// `filename="…"` of a Content-Disposition, else the last component of the URL's path, unless the redaction of
    /// URLs takes it for a secret (`…/dl/Xy7kQ9pL2mN4rT8vW1zA`, a JWT, `bot123:secret…`): the upload's name is shown to
    /// API clients and in webhooks, where the URL itself is shown redacted.
    public static func filename(disposition: String?, url: String) -> String? {
        // Parsed as a header's parameters: `filename` in any case, a quoted value that holds `;` or escapes (cut at
        // its first `;`, `"clip; final.mp4"` was named `"clip`).
        if let disposition, let value = HeaderParameter.value("filename", in: disposition), !value.isEmpty { return value }
        guard let path = URLComponents(string: url)?.path, let last = path.split(separator: "/").last,
              !RedactedURL.isSecret(last) else { return nil }
        return last.removingPercentEncoding ?? String(last)
    }
}
