using PersistentServices.Calls;

namespace PersistentServices.Http.IdempotencyKeys;

/// <summary>
/// How a gateway vouches for an <c>Idempotency-Key</c> it generated (docs/gateway.md, "Generated keys"): header
/// <see cref="Header"/>, a peer signature (<see cref="PeerSignature"/>, <c>v2</c>, role <see cref="Role"/>) with the
/// deployment's peer key over the method, the path and query as sent, and the key. A service that verifies it keeps the key
/// apart from clients' own keys (another scope, its own share, a retention of minutes); one that cannot (no such header, a
/// wrong key, too old) takes the key for the client's own. Compiled into the service and, linked, into the gateway, so both
/// sign the same message.
/// </summary>
internal static class GatewayKeySignature
{
    /// <summary>The request header that carries the signature.</summary>
    public const string Header = "PS-Gateway-Signature";

    /// <summary>How every key a gateway generates begins.</summary>
    public const string KeyPrefix = "ps-gateway-";

    /// <summary>The signature's role field: a gateway's key, not a call between services.</summary>
    public const string Role = "gateway-key";

    /// <summary>The signature's caller field.</summary>
    public const string Caller = "ps-gateway";

    /// <summary>What the signature covers.</summary>
    public static PeerMessage Message(string method, string pathAndQuery, string key)
        => new(method, pathAndQuery, Caller, Callee: "", Session: "", Sequence: "", Role, Dv: key, ContentType: "");

    /// <summary>The header's value for <paramref name="key"/> on a request, signed at <paramref name="unixMs"/>.</summary>
    public static string Sign(byte[] peerKey, long unixMs, string method, string pathAndQuery, string key)
        => PeerSignature.Sign(peerKey, unixMs, PeerSignature.V2, Message(method, pathAndQuery, key), []);
}
