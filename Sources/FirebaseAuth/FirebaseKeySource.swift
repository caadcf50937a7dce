import Foundation
public import LedgerCrypto
import StrictJSON

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Why the certificate set could not be loaded.
public struct FirebaseKeyError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Google's Firebase ID token certificates: a JSON object mapping each `kid` to a PEM X.509
/// certificate, fetched from a URL (Google's by default, with the toolchain's URLSession) or read
/// from a file, and cached.
///
/// - From a URL, the set is kept for the response's `Cache-Control: max-age` (an hour when the
///   header is missing); then, and whenever a token names a `kid` the set lacks, it is fetched
///   again, at most once every ``minimumRefreshInterval`` seconds. While a fetch fails the
///   previous set stays in use, for at most ``maximumStaleness`` seconds past its expiry.
/// - From a file, the set never expires; an unknown `kid` re-reads the file (at most once a minute).
public final class FirebaseKeySource: @unchecked Sendable {
    public enum Location: Sendable {
        case url(URL)
        case file(String)
    }

    /// Google's published set for Firebase ID tokens.
    public static let googleCertificatesURL = "https://www.googleapis.com/robot/v1/metadata/x509/securetoken@system.gserviceaccount.com"
    public static let minimumRefreshInterval: Int64 = 60
    public static let maximumStaleness: Int64 = 24 * 3600
    /// The largest certificate set read, and the most certificates in it.
    public static let maximumBytes = 1 << 20
    public static let maximumCertificates = 64

    /// One fetch, for logs and metrics.
    public struct Refresh: Sendable {
        public var succeeded: Bool
        public var certificates: Int
        /// Why it failed.
        public var error: String?
    }

    public let location: Location
    private let clock: @Sendable () -> Int64
    private let onRefresh: (@Sendable (Refresh) -> Void)?
    private let condition = NSCondition()
    private var keys: [String: RSAPublicKey] = [:]
    /// When the set must be fetched again; nil for a file (never).
    private var expiresAt: Int64?
    private var lastAttempt: Int64?
    private var refreshing = false

    public init(
        _ location: Location, clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) },
        onRefresh: (@Sendable (Refresh) -> Void)? = nil
    ) {
        self.location = location
        self.clock = clock
        self.onRefresh = onRefresh
    }

    /// Loads the set now (at start-up), whatever the rate limit.
    /// - Throws: why it could not be loaded.
    public func load() throws(FirebaseKeyError) {
        condition.withLock {
            refreshing = true
            lastAttempt = clock()
        }
        if case .failure(let error) = refresh() { throw error }
    }

    /// The key named `kid`: from the cached set, or after fetching it again when the set lacks
    /// `kid` (see the type's rules). An expired set that holds `kid` answers at once while a
    /// fetch runs in the background.
    public func key(for kid: String) -> Result<RSAPublicKey, TokenError> {
        let now = clock()
        condition.lock()
        let cached = usable(at: now) ? keys[kid] : nil
        if let cached, expiresAt.map({ now < $0 }) ?? true {
            condition.unlock()
            return .success(cached)
        }
        let mayRefresh = !refreshing && lastAttempt.map { now - $0 >= Self.minimumRefreshInterval } ?? true
        if mayRefresh {
            refreshing = true
            lastAttempt = now
        } else if cached == nil {
            while refreshing { condition.wait() }  // a fetch is in flight: its outcome decides
        }
        condition.unlock()
        if let cached {
            if mayRefresh { DispatchQueue.global().async { _ = self.refresh() } }
            return .success(cached)
        }
        if mayRefresh { _ = refresh() }
        return condition.withLock {
            if usable(at: now), let key = keys[kid] { return .success(key) }
            guard usable(at: now), !keys.isEmpty else {
                return .failure(TokenError(.keysUnavailable, "no current Firebase token certificates are available; retry later"))
            }
            return .failure(TokenError(.unknownKey, "kid \(kid) is none of the current Firebase token certificates"))
        }
    }

    /// Whether the cached set may still be used at `now` (expired at most ``maximumStaleness`` ago).
    private func usable(at now: Int64) -> Bool { expiresAt.map { now < $0 + Self.maximumStaleness } ?? true }

    /// Fetches (or reads) the set and installs it; on failure keeps the previous one.
    private func refresh() -> Result<Void, FirebaseKeyError> {
        let outcome = Result { () throws(FirebaseKeyError) in try fetch() }
        let now = clock()
        let count = condition.withLock {
            if case .success(let (set, maximumAge)) = outcome {
                keys = set
                if case .url = location { expiresAt = now + (maximumAge ?? 3600) }
            }
            refreshing = false
            condition.broadcast()
            return keys.count
        }
        switch outcome {
        case .success:
            onRefresh?(Refresh(succeeded: true, certificates: count, error: nil))
            return .success(())
        case .failure(let error):
            onRefresh?(Refresh(succeeded: false, certificates: count, error: error.description))
            return .failure(error)
        }
    }

    private func fetch() throws(FirebaseKeyError) -> (keys: [String: RSAPublicKey], maximumAge: Int64?) {
        switch location {
        case .file(let path):
            let data: Data
            do {
                data = try Data(contentsOf: URL(fileURLWithPath: path))
            } catch {
                throw FirebaseKeyError("cannot read the Firebase certificates file \(path): \(error.localizedDescription)")
            }
            return (try Self.parseCertificates([UInt8](data)), nil)
        case .url(let url):
            let (data, cacheControl) = try Self.download(url)
            return (try Self.parseCertificates(data), cacheControl.flatMap(Self.maximumAge(cacheControl:)))
        }
    }

    /// GETs `url` (10 s timeout): the body and the `Cache-Control` header.
    private static func download(_ url: URL) throws(FirebaseKeyError) -> ([UInt8], String?) {
        final class Box: @unchecked Sendable { var result: Result<([UInt8], String?), FirebaseKeyError>? }
        let box = Box()
        let done = DispatchSemaphore(value: 0)
        var request = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: 10)
        request.httpMethod = "GET"
        let session = URLSession(configuration: .ephemeral)
        session.dataTask(with: request) { data, response, error in
            defer { done.signal() }
            guard let response = response as? HTTPURLResponse, let data else {
                box.result = .failure(FirebaseKeyError("fetching \(url) failed: \(error.map { "\($0.localizedDescription)" } ?? "no response")"))
                return
            }
            guard response.statusCode == 200 else {
                box.result = .failure(FirebaseKeyError("fetching \(url) answered HTTP \(response.statusCode)"))
                return
            }
            box.result = .success(([UInt8](data), response.value(forHTTPHeaderField: "Cache-Control")))
        }.resume()
        done.wait()
        session.finishTasksAndInvalidate()
        guard let result = box.result else { throw FirebaseKeyError("fetching \(url) gave no result") }
        return try result.get()
    }

    /// The certificates in `data`, a JSON object mapping each `kid` to a PEM certificate with an
    /// RSA key of at least 2,048 bits. Any other content refuses the whole set.
    public static func parseCertificates(_ data: [UInt8]) throws(FirebaseKeyError) -> [String: RSAPublicKey] {
        guard data.count <= maximumBytes else { throw FirebaseKeyError("the certificate set is larger than \(maximumBytes) bytes") }
        let object: JSONMembers
        do {
            object = try JSONReader(maximumDepth: 2, maximumBytes: maximumBytes).object(data)
        } catch {
            throw FirebaseKeyError("the certificate set is not a JSON object mapping kid to PEM certificate: \(error.message)")
        }
        guard !object.isEmpty, object.count <= maximumCertificates else {
            throw FirebaseKeyError("the certificate set holds \(object.count) certificates (1 to \(maximumCertificates) expected)")
        }
        var keys: [String: RSAPublicKey] = [:]
        for (kid, value) in object.pairs {
            guard !kid.isEmpty, kid.utf8.count <= 256 else { throw FirebaseKeyError("a kid is empty or longer than 256 bytes") }
            let parsed: RSAPublicKey?
            do {
                parsed = try value.string.flatMap { try RSAPublicKey(certificatePEM: $0) }
            } catch {
                throw FirebaseKeyError("kid \(kid) could not be read: \(error)")
            }
            guard let key = parsed else {
                throw FirebaseKeyError("kid \(kid) is not a PEM X.509 certificate with an RSA key")
            }
            guard key.bits >= 2048 else { throw FirebaseKeyError("kid \(kid) has a \(key.bits)-bit RSA key (at least 2048 required)") }
            keys[kid] = key
        }
        return keys
    }

    /// The `max-age` of a `Cache-Control` value, in seconds (`no-cache` and `no-store` are 0).
    public static func maximumAge(cacheControl: String) -> Int64? {
        var found: Int64?
        for directive in cacheControl.split(separator: ",") {
            let parts = directive.trimmingCharacters(in: .whitespaces).lowercased().split(separator: "=", maxSplits: 1)
            switch parts.first {
            case "no-cache", "no-store": return 0
            case "max-age":
                guard parts.count == 2, let seconds = Int64(parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\""))), seconds >= 0
                else { continue }
                found = seconds
            default: continue
            }
        }
        return found
    }
}
