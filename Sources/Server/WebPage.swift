import Crypto
import Foundation

/// The browser page (`GET /`) and its assets (plain HTML, CSS and JavaScript modules from `Sources/Server/Web`,
/// compiled into the binary; nothing is loaded from another origin).
///
/// The assets are served under `/assets/<build>/<name>`, `<build>` a digest of all of them: those names never
/// change content, so they are cached for a year (`immutable`); the page itself is revalidated (`no-cache`, ETag).
/// Every answer carries the page's security headers: a Content-Security-Policy with `default-src 'self'` and no
/// inline script, `nosniff`, no referrer, no framing.
struct WebPage: Sendable {
    struct Asset: Sendable {
        let data: Data
        let contentType: String
    }

    /// The assets by file name. Every file of `Sources/Server/Web` is listed here (a test checks it).
    static let files: [(name: String, bytes: [UInt8], contentType: String)] = [
        ("app.js", PackageResources.app_js, "text/javascript; charset=utf-8"),
        ("api.js", PackageResources.api_js, "text/javascript; charset=utf-8"),
        ("eta.js", PackageResources.eta_js, "text/javascript; charset=utf-8"),
        ("jobs.js", PackageResources.jobs_js, "text/javascript; charset=utf-8"),
        ("result.js", PackageResources.result_js, "text/javascript; charset=utf-8"),
        ("tus.js", PackageResources.tus_js, "text/javascript; charset=utf-8"),
        ("app.css", PackageResources.app_css, "text/css; charset=utf-8"),
        ("icon.svg", PackageResources.icon_svg, "image/svg+xml"),
    ]

    static let securityHeaders: [(String, String)] = [
        ("Content-Security-Policy",
         "default-src 'self'; img-src 'self' data: blob:; media-src 'self' blob:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Frame-Options", "DENY"),
    ]

    /// Digest of every asset and the page: part of the assets' path, and the page's ETag.
    let build: String
    private let page: Data
    private let assets: [String: Asset]

    init() {
        let digest = Digest()
        for file in Self.files + [("index.html", PackageResources.index_html, "")] {
            Data(file.name.utf8 + [0] + file.bytes).withUnsafeBytes { digest.update($0) }
        }
        build = String(digest.finish().prefix(16))
        let html = String(decoding: PackageResources.index_html, as: UTF8.self)
        page = Data(html.replacingOccurrences(of: "{{ASSETS}}", with: "/assets/" + build).utf8)
        assets = Dictionary(uniqueKeysWithValues: Self.files.map { ($0.name, Asset(data: Data($0.bytes), contentType: $0.contentType)) })
    }

    /// `GET /`.
    func index(_ request: Request) -> Response {
        answer(page, contentType: "text/html; charset=utf-8", etag: "\"\(build)\"", cache: "no-cache", request: request)
    }

    /// `GET /assets/{build}/{name}`: 404 for another build's or an unknown name.
    func asset(_ request: Request) throws(HTTPError) -> Response {
        guard request.parameters["build"] == build, let name = request.parameters["name"], let asset = assets[name] else {
            var error = HTTPError(.notFound, "not_found", "No asset has that name in this build of the page; load / again.")
            for (field, value) in Self.securityHeaders { error.headers.set(field, value) }
            throw error
        }
        return answer(asset.data, contentType: asset.contentType, etag: "\"\(build)-\(name)\"",
                      cache: "public, max-age=31536000, immutable", request: request)
    }

    private func answer(_ data: Data, contentType: String, etag: String, cache: String, request: Request) -> Response {
        var headers = HTTPHeaders(Self.securityHeaders)
        headers.set("Cache-Control", cache)
        headers.set("ETag", etag)
        if request.headers.ifNoneMatch(etag) { return Response(.notModified, headers: headers) }
        headers.set("Content-Type", contentType)
        return Response(.ok, headers: headers, body: .data(data))
    }
}
