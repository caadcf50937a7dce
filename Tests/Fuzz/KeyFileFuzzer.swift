// libFuzzer harness for key files: `ledger.key` (64 hex digits), the signing key and staff private keys
// (PKCS#8 PEM) and the public keys given to `dispute verify`, `--admin-public-key`, `verify --public-key`
// (SubjectPublicKeyInfo PEM). Every input parses or is refused with a key-file error, never a trap or a
// libcrypto error; a key that parses writes back to PEM that parses to the same key.
import LedgerCrypto

@testable import LedgerStore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzKeyFile(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    let bytes = fuzzInput(start, count)
    do {
        _ = try LedgerKeys.parse(bytes, path: "ledger.key")
    } catch {
        expect(error as? LedgerStoreError == .malformedKey(path: "ledger.key"), "ledger.key: \(error)")
    }
    let text = String(decoding: bytes, as: UTF8.self)
    do {
        let key = try Ed25519PrivateKey(pem: text)
        expect((try? Ed25519PrivateKey(pem: key.pem))?.rawRepresentation == key.rawRepresentation, "private key PEM did not round-trip")
    } catch {
        expect(error is Ed25519Error, "private key: \(error)")
    }
    do {
        let key = try Ed25519PublicKey(pem: text)
        expect((try? Ed25519PublicKey(pem: key.pem)) == key, "public key PEM did not round-trip")
    } catch {
        expect(error is Ed25519Error, "public key: \(error)")
    }
    return 0
}
