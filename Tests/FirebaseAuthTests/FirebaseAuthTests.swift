import FirebaseAuth
import Foundation
import HTTPServer
import LedgerCrypto
import LedgerTestSupport
import Testing

/// Firebase ID tokens signed here with the test keys in `Keys/`: what verifies, every refusal, and
/// where the certificates come from (a file, or a URL honouring Cache-Control and refreshed on an
/// unknown kid at most once a minute).
@Suite struct FirebaseAuthTests {
    static let keys = LedgerBinary.packageRoot.appendingPathComponent("Tests/FirebaseAuthTests/Keys")
    static let projectId = "myrecipes-test"
    /// 2026-11-01T00:00:00Z, in seconds.
    static let now: Int64 = 1_793_491_200

    static func text(_ name: String) throws -> String { try String(contentsOf: keys.appendingPathComponent(name), encoding: .utf8) }

    /// A clock the tests move.
    final class Clock: @unchecked Sendable {
        private let lock = NSLock()
        private var seconds: Int64
        init(_ seconds: Int64 = FirebaseAuthTests.now) { self.seconds = seconds }
        var now: Int64 { lock.withLock { seconds } }
        func advance(_ by: Int64) { lock.withLock { seconds += by } }
    }

    func verifier(clockSkew: Int64 = 300, clock: Clock = Clock()) -> FirebaseTokenVerifier {
        let source = FirebaseKeySource(.file(Self.keys.appendingPathComponent("certificates.json").path), clock: { clock.now })
        return FirebaseTokenVerifier(projectId: Self.projectId, keys: source, clockSkew: clockSkew, clock: { clock.now })
    }

    static func token(
        uid: String = "alice-uid", keyId: String? = "test-key-1", signer: Int = 1, change: (inout [String: Any]) -> Void = { _ in }
    ) throws -> String {
        var claims = TestTokenSigner.claims(projectId: projectId, uid: uid, now: now)
        change(&claims)
        return try TestTokenSigner.sign(
            claims: claims, keyId: keyId, algorithm: .rs256(privateKeyPEM: try text("token-signer-\(signer).key.pem")))
    }

    @Test func aValidTokenProvesItsSubject() throws {
        let verifier = verifier()
        #expect(try verifier.verify(Self.token()).get() == FirebaseUser(uid: "alice-uid", expiresAt: Self.now + 3600, signedInAt: Self.now - 60))
        #expect(try verifier.verify(Self.token(uid: "bob", keyId: "test-key-2", signer: 2)).get().uid == "bob")
        #expect(try verifier.verify(Self.token(uid: String(repeating: "u", count: 128))).get().uid.count == 128)
    }

    @Test func everyRefusalHasItsCode() throws {
        let verifier = verifier()
        let certificate = Array(try Self.text("token-signer-1.cert.pem").utf8)
        let claims = TestTokenSigner.claims(projectId: Self.projectId, uid: "alice-uid", now: Self.now)
        let key = try Self.text("token-signer-1.key.pem")
        let valid = try Self.token()
        let cases: [(String, TokenError.Code, String)] = [
            ("alg none", .unsupportedAlgorithm, try TestTokenSigner.sign(claims: claims, keyId: "test-key-1", algorithm: .none)),
            (
                "HS256 keyed with the public certificate", .unsupportedAlgorithm,
                try TestTokenSigner.sign(claims: claims, keyId: "test-key-1", algorithm: .hs256(key: certificate))
            ),
            ("RS512", .unsupportedAlgorithm, try TestTokenSigner.sign(claims: claims, keyId: "test-key-1", algorithm: .rs512(privateKeyPEM: key))),
            (
                "crit header", .unsupportedAlgorithm,
                try TestTokenSigner.sign(
                    claims: claims, keyId: nil, algorithm: .rs256(privateKeyPEM: key),
                    header: ["alg": "RS256", "kid": "test-key-1", "crit": ["exp"]])
            ),
            ("unknown kid", .unknownKey, try Self.token(keyId: "test-key-9")),
            ("no kid", .malformedToken, try Self.token(keyId: nil)),
            ("wrong aud", .wrongAudience, try Self.token { $0["aud"] = "another-project" }),
            ("wrong iss", .wrongIssuer, try Self.token { $0["iss"] = "https://securetoken.google.com/another-project" }),
            ("iss of another issuer", .wrongIssuer, try Self.token { $0["iss"] = "https://accounts.google.com" }),
            ("expired", .expired, try Self.token { $0["exp"] = Self.now - 301 }),
            ("future iat", .issuedInFuture, try Self.token { $0["iat"] = Self.now + 301 }),
            ("future auth_time", .authTimeInFuture, try Self.token { $0["auth_time"] = Self.now + 301 }),
            ("empty sub", .invalidSubject, try Self.token(uid: "")),
            ("sub of 129 characters", .invalidSubject, try Self.token(uid: String(repeating: "u", count: 129))),
            ("no sub", .invalidSubject, try Self.token { $0["sub"] = nil }),
            // The rule `submit` applies to a UID: no control character, at most 256 bytes.
            ("sub with NUL", .invalidSubject, try Self.token(uid: "alice\u{0}uid")),
            ("sub with LF", .invalidSubject, try Self.token(uid: "alice\nuid")),
            ("sub of 128 emoji (512 bytes)", .invalidSubject, try Self.token(uid: String(repeating: "😀", count: 128))),
            ("bad signature (another key under kid 1)", .invalidSignature, try Self.token(keyId: "test-key-1", signer: 2)),
            ("payload changed after signing", .invalidSignature, try Self.swapPayload(of: valid, with: Self.token(uid: "mallory"))),
            (
                "sub given twice", .malformedToken,
                try TestTokenSigner.sign(
                    header: Array(#"{"alg":"RS256","kid":"test-key-1"}"#.utf8),
                    claims: Array(
                        #"{"aud":"myrecipes-test","iss":"https://securetoken.google.com/myrecipes-test","sub":"alice-uid","sub":"mallory","iat":\#(Self.now),"auth_time":\#(Self.now),"exp":\#(Self.now + 600)}"#
                            .utf8), algorithm: .rs256(privateKeyPEM: key))
            ),
            ("exp as a string", .malformedToken, try Self.token { $0["exp"] = "\(Self.now + 3600)" }),
            ("exp as a boolean", .malformedToken, try Self.token { $0["exp"] = true }),
            ("no exp", .malformedToken, try Self.token { $0["exp"] = nil }),
            ("no auth_time", .malformedToken, try Self.token { $0["auth_time"] = nil }),
            ("two parts", .malformedToken, valid.split(separator: ".").prefix(2).joined(separator: ".")),
            ("four parts", .malformedToken, valid + ".e30"),
            ("not base64url", .malformedToken, "eyJ*.eyJ.AAAA"),
            ("header not JSON", .malformedToken, "bm90IGpzb24." + valid.split(separator: ".")[1] + "." + valid.split(separator: ".")[2]),
            ("empty", .malformedToken, ""),
            ("oversized", .malformedToken, String(repeating: "a", count: 20_000) + ".b.c"),
        ]
        for (name, code, token) in cases {
            let outcome = verifier.verify(token)
            guard case .failure(let error) = outcome else {
                Issue.record("\(name) verified")
                continue
            }
            #expect(error.code == code, "\(name): \(error)")
            #expect(!error.message.contains(token) || token.isEmpty, "\(name): the message repeats the token")
        }
    }

    static func swapPayload(of token: String, with other: String) -> String {
        let parts = token.split(separator: ".")
        return [parts[0], other.split(separator: ".")[1], parts[2]].joined(separator: ".")
    }

    @Test func aSignatureLibcryptoCannotCheckIsAnInternalFailureNotARefusal() throws {
        let clock = Clock()
        let source = FirebaseKeySource(.file(Self.keys.appendingPathComponent("certificates.json").path), clock: { clock.now })
        let failing = FirebaseTokenVerifier(projectId: Self.projectId, keys: source, clock: { clock.now }) { _, _, _ throws(CryptoError) in
            throw CryptoError("EVP_DigestVerifyInit", detail: "injected failure")
        }
        // A good token and one with another key's signature alike: no verdict either way.
        for token in [try Self.token(), try Self.token(keyId: "test-key-1", signer: 2)] {
            let error = try #require(failing.verify(token).failure)
            #expect(error.code == .cryptoFailure && error.code.rawValue == "internal")
            #expect(error.message.contains("could not be checked") && error.message.contains("injected failure"), "\(error)")
            #expect(!error.description.contains(token) && !error.description.contains("alice-uid"), "the token is never repeated")
        }
        // What is refused before the signature is checked keeps its own code.
        #expect(failing.verify(try Self.token { $0["aud"] = "another-project" }).failure?.code == .wrongAudience)
        #expect(verifier().verify(try Self.token(keyId: "test-key-1", signer: 2)).failure?.code == .invalidSignature)
    }

    @Test func clockSkewIsConfigurable() throws {
        let fourMinutesLate = try Self.token { $0["exp"] = Self.now - 240 }
        let fourMinutesEarly = try Self.token { $0["iat"] = Self.now + 240 }
        #expect((try? verifier().verify(fourMinutesLate).get()) != nil, "within the default 5 minutes")
        #expect((try? verifier().verify(fourMinutesEarly).get()) != nil)
        #expect(verifier(clockSkew: 0).verify(fourMinutesLate).failure?.code == .expired)
        #expect(verifier(clockSkew: 0).verify(fourMinutesEarly).failure?.code == .issuedInFuture)
    }

    /// A destructive request asks for a recent sign-in on top of a valid token: `auth_time` at most
    /// the window (plus the clock skew) ago, checked against the clock at each request.
    @Test func aRecentSignInIsRequiredOnlyWhereAsked() throws {
        let clock = Clock()
        let verifier = verifier(clockSkew: 60, clock: clock)
        let user = try verifier.verify(try Self.token { $0["auth_time"] = Self.now - 100 }).get()
        #expect(user.signedInAt == Self.now - 100)
        try verifier.requireSignIn(user, within: 40)
        clock.advance(1)
        #expect(
            throws: TokenError(
                .requiresRecentLogin, "the user last signed in more than 40 seconds ago: sign in again, then retry with the new ID token")
        ) {
            try verifier.requireSignIn(user, within: 40)
        }
        try verifier.requireSignIn(user, within: 300)
    }

    @Test func aTokenSeenBeforeIsAnsweredFromTheCacheWithItsTimesCheckedAgainOnEveryUse() throws {
        let clock = Clock()
        let verifier = verifier(clock: clock)
        let token = try Self.token()
        let alice = FirebaseUser(uid: "alice-uid", expiresAt: Self.now + 3600, signedInAt: Self.now - 60)
        #expect(try verifier.verify(token).get() == alice)
        #expect(try verifier.verify(token).get() == alice)
        #expect(verifier.cacheCounts == (hits: 1, misses: 1))
        // The clock, not the cache, decides: expired (exp + 5 minutes of skew), then iat and
        // auth_time in the future, each refused from the cached entry.
        clock.advance(3600 + 300)
        #expect(verifier.verify(token).failure?.code == .expired)
        clock.advance(-(3600 + 300) - 301)
        #expect(verifier.verify(token).failure?.code == .issuedInFuture)
        let lateAuth = try Self.token { $0["auth_time"] = Self.now + 200 }
        clock.advance(301)
        #expect(try verifier.verify(lateAuth).get() == FirebaseUser(uid: "alice-uid", expiresAt: Self.now + 3600, signedInAt: Self.now + 200))
        clock.advance(-101)
        #expect(verifier.verify(lateAuth).failure?.code == .authTimeInFuture)
        #expect(verifier.cacheCounts == (hits: 4, misses: 2), "each refusal above came from the cached entry")
        // Back inside the window: accepted again; a refusal never leaves an entry behind.
        clock.advance(101)
        #expect(try verifier.verify(token).get() == alice)
        let tampered = Self.swapPayload(of: token, with: try Self.token(uid: "mallory"))
        #expect(verifier.verify(tampered).failure?.code == .invalidSignature)
        #expect(verifier.verify(tampered).failure?.code == .invalidSignature)
    }

    @Test func aRotatedOrWithdrawnCertificateIsNeverServedFromTheCache() throws {
        let directory = TemporaryDirectory("firebase-rotation")
        defer { directory.remove() }
        let file = directory.path("certificates.json")
        func install(_ set: [String: Int]) throws {
            var object: [String: String] = [:]
            for (kid, signer) in set { object[kid] = try Self.text("token-signer-\(signer).cert.pem") }
            try JSONSerialization.data(withJSONObject: object).write(to: file)
        }
        try install(["test-key-1": 1])
        let clock = Clock()
        let source = FirebaseKeySource(.file(file.path), clock: { clock.now })
        try source.load()
        let verifier = FirebaseTokenVerifier(projectId: Self.projectId, keys: source, clock: { clock.now })
        let token = try Self.token()
        #expect(try verifier.verify(token).get().uid == "alice-uid")
        #expect(try verifier.verify(token).get().uid == "alice-uid")
        #expect(verifier.cacheCounts.hits == 1)
        // Google withdraws the kid (the set is read again once a token names an unknown kid): the
        // cached token names a kid the set lacks, and is refused.
        try install(["test-key-2": 2])
        clock.advance(60)
        #expect(verifier.verify(try Self.token(keyId: "test-key-9")).failure?.code == .unknownKey, "this read the new set")
        #expect(verifier.verify(token).failure?.code == .unknownKey)
        #expect(verifier.verify(token).failure?.code == .unknownKey)
        // The kid comes back: verified in full, and cached again.
        try install(["test-key-1": 1])
        clock.advance(60)
        #expect(try verifier.verify(token).get().uid == "alice-uid")
        #expect(try verifier.verify(token).get().uid == "alice-uid")
        // The same kid now names another certificate: the cached verification was made with the old
        // one, so the token is checked again, against the new one, and its signature fails.
        try install(["test-key-1": 2])
        clock.advance(60)
        #expect(verifier.verify(try Self.token(keyId: "test-key-9")).failure?.code == .unknownKey, "this read the new set")
        #expect(verifier.verify(token).failure?.code == .invalidSignature)
        #expect(try verifier.verify(Self.token(uid: "bob", signer: 2)).get().uid == "bob")
    }

    @Test func theCacheIsBoundedAndCanBeTurnedOff() throws {
        let clock = Clock()
        let certificates = Self.keys.appendingPathComponent("certificates.json").path
        let small = FirebaseTokenVerifier(
            projectId: Self.projectId, keys: FirebaseKeySource(.file(certificates), clock: { clock.now }), clock: { clock.now },
            cacheCapacity: 4)
        let tokens = try (0..<10).map { try Self.token(uid: "user-\($0)") }
        for (index, token) in tokens.enumerated() { #expect(try small.verify(token).get().uid == "user-\(index)") }
        #expect(small.cacheCounts == (hits: 0, misses: 10))
        #expect(try small.verify(tokens[9]).get().uid == "user-9")
        #expect(try small.verify(tokens[0]).get().uid == "user-0")
        #expect(small.cacheCounts == (hits: 1, misses: 11), "the newest is kept, the oldest was dropped and verified again")
        let none = FirebaseTokenVerifier(
            projectId: Self.projectId, keys: FirebaseKeySource(.file(certificates), clock: { clock.now }), clock: { clock.now },
            cacheCapacity: 0)
        #expect(try none.verify(tokens[0]).get().uid == "user-0")
        #expect(try none.verify(tokens[0]).get().uid == "user-0")
        #expect(none.cacheCounts == (hits: 0, misses: 0))
    }

    @Test func aCertificateSetWithAnythingButRSACertificatesIsRefusedWhole() throws {
        let good = try Self.text("token-signer-1.cert.pem")
        let tlsCertificate = try String(
            contentsOf: LedgerBinary.packageRoot.appendingPathComponent("Tests/HTTPServerTests/TLS/localhost.cert.pem"), encoding: .utf8)
        func json(_ object: Any) throws -> [UInt8] { [UInt8](try JSONSerialization.data(withJSONObject: object)) }
        #expect(try FirebaseKeySource.parseCertificates(json(["k1": good])).keys.sorted() == ["k1"])
        let refused: [(String, [UInt8])] = [
            ("not JSON", Array("nope".utf8)),
            ("an array", try json([good])),
            ("empty", try json([String: String]())),
            ("a number", try json(["k1": 5])),
            ("not a certificate", try json(["k1": good, "k2": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"])),
            ("an EC key", try json(["k1": good, "k2": tlsCertificate])),
            ("a 1024-bit RSA key", try json(["k1": good, "k2": try Self.text("weak.cert.pem")])),
            ("an empty kid", try json(["": good])),
            ("too large", Array(repeating: UInt8(ascii: " "), count: FirebaseKeySource.maximumBytes + 1)),
        ]
        for (name, data) in refused {
            #expect(throws: FirebaseKeyError.self, "\(name)") { try FirebaseKeySource.parseCertificates(data) }
        }
    }

    /// A fake certificate endpoint: serves `body` with `Cache-Control: max-age=100`, counting fetches.
    final class CertificateEndpoint: @unchecked Sendable {
        private let lock = NSLock()
        private var body: String
        private var status = 200
        private(set) var fetches = 0
        var server: HTTPServer?

        init(_ body: String) { self.body = body }

        func serve(_ body: String, status: Int = 200) {
            lock.withLock {
                self.body = body
                self.status = status
            }
        }

        var count: Int { lock.withLock { fetches } }

        func respond(_ request: HTTPRequest) -> HTTPResponse {
            lock.withLock {
                fetches += 1
                return .json(status, body, headers: [("Cache-Control", "public, max-age=100, must-revalidate, no-transform")])
            }
        }
    }

    static func certificates(_ kids: [Int]) throws -> String {
        var object: [String: String] = [:]
        for kid in kids { object["test-key-\(kid)"] = try text("token-signer-\(kid).cert.pem") }
        return String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
    }

    @Test func certificatesFromAURLAreCachedForMaxAgeAndRefreshedOnAnUnknownKidAtMostOnceAMinute() throws {
        let endpoint = CertificateEndpoint(try Self.certificates([1]))
        let server = try HTTPServer(configuration: .init(), respond: endpoint.respond)
        defer { server.shutdown() }
        let clock = Clock()
        let refreshes = Collected<FirebaseKeySource.Refresh>()
        let url = try #require(URL(string: "http://127.0.0.1:\(server.port)/certificates"))
        let source = FirebaseKeySource(.url(url), clock: { clock.now }, onRefresh: refreshes.add)
        let verifier = FirebaseTokenVerifier(projectId: Self.projectId, keys: source, clock: { clock.now })
        // First use fetches; within max-age no fetch.
        #expect(try verifier.verify(Self.token()).get().uid == "alice-uid")
        #expect(try verifier.verify(Self.token(uid: "b")).get().uid == "b")
        #expect(endpoint.count == 1)
        // A kid the set lacks: fetched again at once; Google has rotated in key 2.
        endpoint.serve(try Self.certificates([1, 2]))
        clock.advance(61)
        #expect(try verifier.verify(Self.token(keyId: "test-key-2", signer: 2)).get().uid == "alice-uid")
        #expect(endpoint.count == 2)
        // Another unknown kid within the minute: refused without a fetch. A minute later: fetched.
        #expect(verifier.verify(try Self.token(keyId: "test-key-9")).failure?.code == .unknownKey)
        #expect(endpoint.count == 2)
        clock.advance(60)
        #expect(verifier.verify(try Self.token(keyId: "test-key-9")).failure?.code == .unknownKey)
        #expect(endpoint.count == 3)
        // Past max-age: the cached set still answers while it is fetched again in the background.
        clock.advance(101)
        endpoint.serve("{}", status: 503)
        #expect((try? verifier.verify(Self.token()).get()) != nil)
        let deadline = Date().addingTimeInterval(10)
        while refreshes.list.count < 4 && Date() < deadline { usleep(2_000) }
        #expect(endpoint.count == 4)
        #expect(refreshes.list.map(\.succeeded) == [true, true, true, false], "a failed fetch is reported")
        // The failed fetch kept the previous set.
        #expect(try verifier.verify(Self.token(keyId: "test-key-2", signer: 2)).get().uid == "alice-uid")
    }

    @Test func anUnreachableEndpointLeavesNoKeysAndSaysSo() throws {
        let clock = Clock()
        let url = try #require(URL(string: "http://127.0.0.1:9/certificates"))  // discard port: nothing listens
        let source = FirebaseKeySource(.url(url), clock: { clock.now })
        #expect(throws: FirebaseKeyError.self) { try source.load() }
        let verifier = FirebaseTokenVerifier(projectId: Self.projectId, keys: source, clock: { clock.now })
        #expect(verifier.verify(try Self.token()).failure?.code == .keysUnavailable)
    }

    @Test func aCertificateFileIsReadAgainOnAnUnknownKidAtMostOnceAMinute() throws {
        let directory = TemporaryDirectory("firebase-file")
        defer { directory.remove() }
        let file = directory.path("certificates.json")
        try Data(try Self.certificates([1]).utf8).write(to: file)
        let clock = Clock()
        let source = FirebaseKeySource(.file(file.path), clock: { clock.now })
        try source.load()
        let verifier = FirebaseTokenVerifier(projectId: Self.projectId, keys: source, clock: { clock.now })
        #expect(try verifier.verify(Self.token()).get().uid == "alice-uid")
        try Data(try Self.certificates([1, 2]).utf8).write(to: file)
        #expect(verifier.verify(try Self.token(keyId: "test-key-2", signer: 2)).failure?.code == .unknownKey, "read again within the minute")
        clock.advance(60)
        #expect(try verifier.verify(Self.token(keyId: "test-key-2", signer: 2)).get().uid == "alice-uid")
        clock.advance(10 * 365 * 86_400)
        #expect(
            (try? verifier.verify(
                Self.token {
                    $0["exp"] = clock.now + 60; $0["iat"] = clock.now
                }
            ).get()) != nil, "a file never expires")
        #expect(throws: FirebaseKeyError.self) { try FirebaseKeySource(.file(directory.path("missing.json").path)).load() }
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
