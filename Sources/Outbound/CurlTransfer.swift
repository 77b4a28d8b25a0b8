import CCurl
import Foundation
import Glibc

/// One libcurl easy handle (its only owner): performs `OutboundRequest`s one at a time on the calling thread, which
/// blocks, so call it from a pool or a dedicated thread. Every connection it opens is first checked against an
/// `AddressPolicy` (libcurl's open-socket callback hands over the address it is about to connect to, after DNS and on
/// every redirect). Proxies from the environment are ignored, and only http and https are spoken, on redirects too.
public final class CurlTransfer {
    private let handle: UnsafeMutableRawPointer

    /// libcurl's global set-up, done once before the first handle (it is not thread-safe itself).
    private static let initialized: Bool = curl_global_init(Int(CURL_GLOBAL_ALL)) == CURLE_OK

    public init() {
        precondition(Self.initialized, "libcurl failed to initialize")
        guard let handle = curl_easy_init() else { preconditionFailure("curl_easy_init failed") }
        self.handle = handle
    }

    deinit { curl_easy_cleanup(handle) }

    /// What the callbacks share with `perform`, for the length of one transfer.
    private final class State {
        let policy: AddressPolicy
        let maxBytes: Int64?
        let stallTimeout: Double?
        let minimumRate: Int64?
        let sink: ((UnsafeRawBufferPointer) -> OutboundError?)?
        let progress: ((Int64, Int64?) -> Bool)?
        /// The last address the policy refused, and how many it allowed, since the latest answer: a failure counts
        /// as a refusal only when nothing was allowed to connect (a name with a refused IPv6 address and an allowed
        /// IPv4 one that is down is a connection failure, retried as one).
        var refused: (address: IPAddress, kind: String)?
        var allowed = 0
        var status = 0
        var headers: [(String, String)] = []
        var bytes: Int64 = 0
        var body = Data()
        /// Set when the transfer was ended on purpose, its answer whole enough: the status and headers (`readsBody`
        /// false), or the 64 KiB of a body that is only kept.
        var endedEarly = false
        /// Whether the current request still waits for its connection: from the start, and again after a redirect
        /// that is followed, until libcurl is about to send on a connection (made, or kept from before).
        var awaitingConnection = true
        let readsBody: Bool
        let followsRedirects: Bool
        /// Whether the latest answer is a redirect libcurl follows (another request comes after it).
        var isFollowedRedirect: Bool { followsRedirects && (300..<400).contains(status) }
        var failure: OutboundError?
        var lastArrival = Date().timeIntervalSince1970
        /// The current window of the pace check: when it began (nil until the first body byte) and the bytes then.
        var window: (start: Double, bytes: Int64)?
        var errorText = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)

        init(request: OutboundRequest, policy: AddressPolicy, sink: ((UnsafeRawBufferPointer) -> OutboundError?)?,
             progress: ((Int64, Int64?) -> Bool)?) {
            self.policy = policy
            maxBytes = request.maxBytes
            readsBody = request.readsBody
            followsRedirects = request.maxRedirects > 0
            stallTimeout = request.stallTimeout
            minimumRate = request.minimumRate
            self.sink = sink
            self.progress = progress
        }

        static func from(_ pointer: UnsafeMutableRawPointer?) -> State {
            Unmanaged<State>.fromOpaque(pointer!).takeUnretainedValue()
        }
    }

    /// Performs `request`. With a `sink`, the body of a successful (2xx) answer goes there as it arrives (an error it
    /// returns stops the transfer); otherwise up to 64 KiB of it is kept in the response, and no more is read (nothing
    /// of it without `readsBody`). `progress` hears the bytes
    /// so far and the expected total, about once a second and on every chunk; returning false cancels.
    public func perform(_ request: OutboundRequest, policy: AddressPolicy,
                        sink: ((UnsafeRawBufferPointer) -> OutboundError?)? = nil,
                        progress: ((Int64, Int64?) -> Bool)? = nil) throws(OutboundError) -> OutboundResponse {
        // `scheme://` whole: libcurl also reads `http:/user:pw@host` and `http:user:pw@host`, with credentials.
        let scheme = request.url.prefix { $0 != ":" }.lowercased()
        guard scheme == "http" || scheme == "https", request.url.dropFirst(scheme.count).hasPrefix("://"), request.url.count < 8192 else {
            throw OutboundError(code: "invalid_url", message: "Only http and https URLs can be fetched.")
        }
        curl_easy_reset(handle)
        let state = State(request: request, policy: policy, sink: sink, progress: progress)
        let context = Unmanaged.passRetained(state)
        defer { context.release() }
        let pointer = context.toOpaque()
        var headerList: UnsafeMutablePointer<curl_slist>?
        defer { curl_slist_free_all(headerList) }
        for (name, value) in request.headers { headerList = curl_slist_append(headerList, "\(name): \(value)") }
        headerList = curl_slist_append(headerList, "Expect:")
        var resolveList: UnsafeMutablePointer<curl_slist>?
        defer { curl_slist_free_all(resolveList) }
        for entry in request.resolving { resolveList = curl_slist_append(resolveList, entry) }

        var code = state.errorText.withUnsafeMutableBufferPointer { errorText -> CURLcode in
            set(CURLOPT_ERRORBUFFER, pointer: errorText.baseAddress)
            set(CURLOPT_URL, request.url)
            set(CURLOPT_NOSIGNAL, 1)
            set(CURLOPT_PROXY, "")
            set(CURLOPT_PROTOCOLS_STR, "http,https")
            set(CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
            set(CURLOPT_USERAGENT, "transcoderd")
            set(CURLOPT_FOLLOWLOCATION, request.maxRedirects > 0 ? 1 : 0)
            set(CURLOPT_MAXREDIRS, request.maxRedirects)
            set(CURLOPT_TIMEOUT_MS, Int(request.timeout * 1000))
            set(CURLOPT_CONNECTTIMEOUT_MS, Int(min(request.timeout, 10) * 1000))
            set(CURLOPT_HTTPHEADER, pointer: headerList)
            if resolveList != nil { set(CURLOPT_RESOLVE, pointer: resolveList) }
            if let maxBytes = request.maxBytes { tc_curl_set_offset(handle, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(maxBytes)) }
            if request.method == "POST" {
                set(CURLOPT_POST, 1)
                let body = request.body ?? Data()
                tc_curl_set_offset(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count))
                body.withUnsafeBytes { bytes in
                    // Copied by libcurl: the bytes need not outlive this call.
                    set(CURLOPT_COPYPOSTFIELDS, pointer: UnsafeMutableRawPointer(mutating: bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!))
                }
            }
            tc_curl_set_open_socket(handle, Self.openSocket)
            set(CURLOPT_OPENSOCKETDATA, pointer: pointer)
            tc_curl_set_header(handle, Self.receiveHeader)
            set(CURLOPT_HEADERDATA, pointer: pointer)
            tc_curl_set_write(handle, Self.receiveBody)
            set(CURLOPT_WRITEDATA, pointer: pointer)
            set(CURLOPT_NOPROGRESS, 0)
            tc_curl_set_prereq(handle, Self.connectionReady)
            set(CURLOPT_PREREQDATA, pointer: pointer)
            tc_curl_set_progress(handle, Self.reportProgress)
            set(CURLOPT_XFERINFODATA, pointer: pointer)
            return curl_easy_perform(handle)
        }
        if code == CURLE_WRITE_ERROR, state.endedEarly, state.failure == nil {
            code = CURLE_OK
        }
        if code == CURLE_OK, state.failure == nil, state.status == 0 {
            code = CURLE_GOT_NOTHING
        }
        if let failure = state.failure { throw failure }
        if let refused = state.refused, state.allowed == 0, code != CURLE_OK {
            // The kind, not the address: a name's internal address is no business of whoever sent the URL (it
            // would map the network behind this server, one name at a time).
            throw OutboundError(code: "url_not_allowed", message: "The URL leads to \(AddressPolicy.phrase(refused.kind)), "
                                + "which this server does not connect to (--allow-private-urls can allow it).")
        }
        guard code == CURLE_OK else {
            let detail = String(decoding: state.errorText.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if code == CURLE_OPERATION_TIMEDOUT, state.awaitingConnection {
                // No connection was made in time (a name that did not resolve, packets dropped by a firewall or a
                // full backlog), for the first request or a redirect's: as passing as one refused, not a transfer
                // that took too long, which is not tried again. (libcurl's connect time adds every hop's up: a
                // redirect to a server that drops packets counted as connected.)
                throw OutboundError(code: "connection_failed", message: "The connection could not be made in time: \(detail.isEmpty ? "timeout" : detail).")
            }
            throw Self.failure(code, detail: detail)
        }
        // Where the redirects led (the URL asked for, when libcurl cannot say).
        var effective: UnsafeMutablePointer<CChar>?
        let url = tc_curl_get_string(handle, CURLINFO_EFFECTIVE_URL, &effective) == CURLE_OK
            ? effective.map { String(cString: $0) } ?? request.url : request.url
        return OutboundResponse(status: state.status, headers: state.headers, bytes: state.bytes, body: state.body, url: url)
    }

    private static func failure(_ code: CURLcode, detail: String) -> OutboundError {
        let message = detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
        switch code {
        case CURLE_OPERATION_TIMEDOUT: return OutboundError(code: "timeout", message: "The request took too long: \(message).")
        case CURLE_FILESIZE_EXCEEDED: return OutboundError(code: "too_large", message: "The answer is larger than allowed: \(message).")
        case CURLE_TOO_MANY_REDIRECTS: return OutboundError(code: "too_many_redirects", message: "Too many redirects: \(message).")
        case CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT:
            return OutboundError(code: "invalid_url", message: "The URL cannot be fetched: \(message).")
        default: return OutboundError(code: "connection_failed", message: "The request failed: \(message).")
        }
    }

    private func set(_ option: CURLoption, _ value: Int) { tc_curl_set_long(handle, option, value) }

    private func set(_ option: CURLoption, _ value: String) { tc_curl_set_string(handle, option, value) }

    private func set<T>(_ option: CURLoption, pointer: UnsafeMutablePointer<T>?) { tc_curl_set_pointer(handle, option, pointer) }

    private func set(_ option: CURLoption, pointer: UnsafeMutableRawPointer?) { tc_curl_set_pointer(handle, option, pointer) }

    // MARK: Callbacks (on the performing thread, inside curl_easy_perform)

    /// Opens the socket for a connection only when the policy allows its address.
    private static let openSocket: @convention(c) (UnsafeMutableRawPointer?, curlsocktype, UnsafeMutablePointer<curl_sockaddr>?)
        -> curl_socket_t = { context, _, address in
        guard let address else { return CURL_SOCKET_BAD }
        let state = State.from(context)
        let socketAddress = (UnsafeRawPointer(address) + MemoryLayout<curl_sockaddr>.offset(of: \.addr)!)
            .assumingMemoryBound(to: sockaddr.self)
        guard let ip = IPAddress(socketAddress: socketAddress) else { return CURL_SOCKET_BAD }
        if let kind = state.policy.refusal(of: ip) {
            state.refused = (ip, kind)
            return CURL_SOCKET_BAD
        }
        state.allowed += 1
        // Close-on-exec: a job's child process started meanwhile must not inherit the connection.
        return socket(address.pointee.family, address.pointee.socktype | Int32(SOCK_CLOEXEC.rawValue), address.pointee.protocol)
    }

    /// A request is about to go out on a connection: it no longer waits for one.
    private static let connectionReady: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutablePointer<CChar>?, UnsafeMutablePointer<CChar>?,
                                                        Int32, Int32) -> Int32 = { context, _, _, _, _ in
        State.from(context).awaitingConnection = false
        return Int32(CURL_PREREQFUNC_OK)
    }

    /// Keeps the status and headers of the latest answer (a redirect's are replaced by the next one's).
    private static let receiveHeader: @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int = {
        data, size, count, context in
        let state = State.from(context)
        let length = size * count
        guard let data else { return length }
        let line = String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        if line.hasPrefix("HTTP/") {
            let parts = line.split(separator: " ")
            state.status = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
            // A redirect followed sends another request, which waits for its own connection.
            state.awaitingConnection = state.isFollowedRedirect
            state.headers = []
            // A redirect's next hop is judged on its own addresses.
            (state.refused, state.allowed) = (nil, 0)
        } else if let colon = line.firstIndex(of: ":") {
            state.headers.append((line[..<colon].lowercased(), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        } else if line.isEmpty, !state.readsBody, state.status >= 200, !state.isFollowedRedirect {
            // The final answer's headers are all in, and its body is not wanted.
            state.endedEarly = true
            return 0
        }
        return length
    }

    private static let receiveBody: @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int = {
        data, size, count, context in
        let state = State.from(context)
        let length = size * count
        let bytes = UnsafeRawBufferPointer(start: data, count: length)
        state.bytes += Int64(length)
        state.lastArrival = Date().timeIntervalSince1970
        if state.window == nil { state.window = (state.lastArrival, 0) }
        if let maxBytes = state.maxBytes, state.bytes > maxBytes {
            state.failure = OutboundError(code: "too_large", message: "The answer is larger than the \(maxBytes) bytes allowed.")
            return 0
        }
        if let sink = state.sink, (200..<300).contains(state.status) {
            if let failure = sink(bytes) {
                state.failure = failure
                return 0
            }
        } else {
            // Kept only in part (an error's explanation): the rest is not read. It was, to the end, however long (a
            // 503 page that streams on was downloaded whole on every try of a URL input).
            state.body.append(contentsOf: bytes.prefix(65536 - state.body.count))
            if state.body.count >= 65536 {
                state.endedEarly = true
                return 0
            }
        }
        return length
    }

    /// Stops a transfer that stalled (no byte for `stallTimeout`, or fewer than `minimumRate` a second over one) or
    /// that its caller gave up on.
    private static let reportProgress: @convention(c) (UnsafeMutableRawPointer?, curl_off_t, curl_off_t, curl_off_t, curl_off_t)
        -> Int32 = { context, total, received, _, _ in
        let state = State.from(context)
        let now = Date().timeIntervalSince1970
        if let stall = state.stallTimeout, now - state.lastArrival > stall {
            state.failure = OutboundError(code: "stalled", message: "No bytes arrived for \(Int(stall)) s; the transfer was stopped.")
            return 1
        }
        if let stall = state.stallTimeout, let rate = state.minimumRate, let window = state.window, now - window.start >= stall {
            let arrived = state.bytes - window.bytes
            if Double(arrived) < Double(rate) * (now - window.start) {
                state.failure = OutboundError(code: "stalled", message: "Only \(arrived) bytes arrived in \(Int(now - window.start)) s, "
                                              + "less than \(rate) a second; the transfer was stopped.")
                return 1
            }
            state.window = (now, state.bytes)
        }
        if let progress = state.progress, !progress(Int64(received), total > 0 ? Int64(total) : nil) {
            state.failure = OutboundError(code: "canceled", message: "The transfer was canceled.")
            return 1
        }
        return 0
    }
}
