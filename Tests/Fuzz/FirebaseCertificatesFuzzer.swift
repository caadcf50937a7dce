// libFuzzer harness for Google's Firebase certificate set (fetched over the network or read from
// `--firebase-certificates FILE`) and the Cache-Control header that comes with it: any bytes parse or
// are refused, never trap; a parsed set holds 1 to 64 RSA keys of at least 2,048 bits.
import FirebaseAuth

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFirebaseCertificates(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = fuzzInput(start, count)
    if let keys = try? FirebaseKeySource.parseCertificates(bytes) {
        expect((1...FirebaseKeySource.maximumCertificates).contains(keys.count), "a parsed set has \(keys.count) keys")
        expect(keys.values.allSatisfy { $0.bits >= 2048 }, "a parsed set holds a weak key")
    }
    if let age = FirebaseKeySource.maximumAge(cacheControl: String(decoding: bytes, as: UTF8.self)) {
        expect(age >= 0, "a negative max-age")
    }
    return 0
}
