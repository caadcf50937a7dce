// libFuzzer harness for Firebase ID tokens (`Authorization: Bearer` on the app's routes of `ledger serve`):
// any bytes must parse or be refused with a code, never trap, and never verify (the fuzzer holds no
// signing key). A token that parses signs exactly its first two parts.
import FirebaseAuth
import Foundation

let verifier = FirebaseTokenVerifier(
    projectId: "myrecipes-test", keys: FirebaseKeySource(.file("Tests/FirebaseAuthTests/Keys/certificates.json")),
    clock: { 1_793_491_200 })

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFirebaseToken(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let text = String(decoding: fuzzInput(start, count), as: UTF8.self)
    if let token = try? FirebaseIDToken(text) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        expect(Array(token.signingInput) == Array((parts[0] + "." + parts[1]).utf8), "the signing input is not the first two parts")
    }
    if case .success = verifier.verify(text) { expect(false, "a fuzzed token verified") }
    return 0
}
