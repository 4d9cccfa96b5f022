using System.Collections.Concurrent;
using System.Security.Cryptography;
using System.Text;
using Microsoft.Extensions.Logging;

namespace PersistentServices.Calls;

/// <summary>
/// This service's side of the peer signatures (docs/calls.md, "Who may call"; <see cref="PeerSignature"/>): signs what it
/// sends to another service of the deployment with <see cref="PersistentCallOptions.PeerKey"/>, and verifies what it
/// receives against that key and <see cref="PersistentCallOptions.AcceptedPeerKeys"/>: the callee must be this service,
/// the timestamp at most <see cref="PersistentCallOptions.SignatureWindow"/> old and at most
/// <see cref="PersistentCallOptions.SignatureFutureSkew"/> ahead, the format <c>v2</c> unless
/// <see cref="PersistentCallOptions.LegacySignatures"/> accepts <c>v1</c>. One per service (<c>PersistentRuntime.Peers</c>).
/// </summary>
internal sealed partial class PeerAuthentication
{
    /// <summary>Callers (with how they signed) already reported once; bounded, as a forged caller never gets here.</summary>
    private const int MaxReported = 1024;

    private readonly PersistentCallOptions _options;
    private readonly string _self;
    private readonly TimeProvider _time;
    private readonly ILogger _logger;
    private readonly byte[]? _signingKey;
    private readonly byte[][] _keys;
    private readonly ConcurrentDictionary<(string Caller, string How), byte> _reported = new();

    public PeerAuthentication(PersistentCallOptions options, string self, TimeProvider time, ILogger logger)
    {
        _options = options;
        _self = self;
        _time = time;
        _logger = logger;
        _signingKey = options.PeerKey is { } key ? Encoding.UTF8.GetBytes(key) : null;
        _keys = _signingKey is null ? [] : [_signingKey, .. options.AcceptedPeerKeys.Select(k => Encoding.UTF8.GetBytes(k))];
    }

    /// <summary>The format this service signs with.</summary>
    public string SigningVersion => _options.LegacySignatures == LegacySignatures.SignAndAccept ? PeerSignature.V1 : PeerSignature.V2;

    /// <summary>The <c>PS-Signature</c> value of a message to <see cref="PeerMessage.Callee"/>, signed now with <see cref="PersistentCallOptions.PeerKey"/>.</summary>
    public string Sign(in PeerMessage message, ReadOnlySpan<byte> body)
    {
        var key = _signingKey ?? throw new InvalidOperationException(
            "PersistentServicesOptions.Calls.PeerKey is not set: calls between persistent services and domain messages are signed with it (docs/calls.md).");
        return PeerSignature.Sign(key, _time.GetUtcNow().ToUnixTimeMilliseconds(), SigningVersion, message, body);
    }

    /// <summary>
    /// Null when <paramref name="header"/> is a valid signature of <paramref name="message"/> (whose
    /// <see cref="PeerMessage.Callee"/> is what the request names, <c>PS-Callee</c>) for this service; otherwise why not,
    /// as a phrase after "it had".
    /// </summary>
    public string? Verify(string? header, in PeerMessage message, ReadOnlySpan<byte> body)
    {
        if (_keys.Length == 0)
        {
            return "no key to verify it: this service has no PersistentServicesOptions.Calls.PeerKey, so it accepts no calls from other services";
        }

        if (PeerSignature.Parse(header, out var error) is not { } signature)
        {
            return error;
        }

        if (signature.Version == PeerSignature.V1 && _options.LegacySignatures == LegacySignatures.Refuse)
        {
            return "a v1 signature, which does not name the callee: this service accepts only v2 (a caller of a version before issue 32; " +
                   "PersistentCallOptions.LegacySignatures lets a rolling upgrade accept it for a while, docs/upgrades.md)";
        }

        // v2 names its callee: a call signed for another service of the deployment (captured there, or sent here through a
        // client named for another service) is refused before its MAC is even computed. v1 names none (and its MAC covers none).
        if (signature.Version == PeerSignature.V2 && !string.Equals(message.Callee, _self, StringComparison.Ordinal))
        {
            return message.Callee.Length == 0
                ? "no PS-Callee header (a v2 signature names the service it is for)"
                : $"a call signed for service '{Truncate(message.Callee)}', not for this one (a captured call sent to another service, or a client " +
                  "whose callee is not this service's ServiceName: AddPersistentCalls(\"<callee's ServiceName>\") names it)";
        }

        var age = _time.GetUtcNow() - DateTimeOffset.FromUnixTimeMilliseconds(Math.Clamp(signature.UnixMs, 0, 253_402_300_799_999));
        if (age > _options.SignatureWindow)
        {
            return $"a timestamp {age.TotalSeconds:0.###} s old, beyond PersistentCallOptions.SignatureWindow ({_options.SignatureWindow.TotalSeconds:0.###} s): " +
                   "a replayed or delayed message, or clocks apart";
        }

        if (-age > _options.SignatureFutureSkew)
        {
            return $"a timestamp {(-age).TotalSeconds:0.###} s ahead of this service's clock, beyond PersistentCallOptions.SignatureFutureSkew " +
                   $"({_options.SignatureFutureSkew.TotalSeconds:0.###} s): the hosts' clocks are apart, or the message was made to be sent later";
        }

        Span<byte> bodyHash = stackalloc byte[32];
        SHA256.HashData(body, bodyHash);
        for (var i = 0; i < _keys.Length; i++)
        {
            if (PeerSignature.Matches(_keys[i], signature.UnixMs, signature.Version, message, bodyHash, signature.Mac))
            {
                Report(message, signature.Version, i);
                return null;
            }
        }

        return _keys.Length == 1
            ? "a signature that does not match (another key, or a changed request)"
            : $"a signature that matches none of the {_keys.Length} keys (PeerKey and AcceptedPeerKeys; another key, or a changed request)";
    }

    /// <summary>
    /// Once per caller: that it still signs v1, or with a key of <see cref="PersistentCallOptions.AcceptedPeerKeys"/>; and
    /// that a caller of this version signing v1 (the first step of an upgrade) names another callee in <c>PS-Callee</c>,
    /// which v1 does not check but v2 will: its calls would be refused once it signs v2.
    /// </summary>
    private void Report(in PeerMessage message, string version, int key)
    {
        var caller = message.Caller;
        if (version == PeerSignature.V1 && Once(caller, "v1"))
        {
            AcceptedV1(_logger, caller, _options.LegacySignatures);
        }

        if (version == PeerSignature.V1 && message.Callee.Length > 0 && message.Callee != _self && Once(caller, "callee " + message.Callee))
        {
            SignedForAnotherCallee(_logger, caller, Truncate(message.Callee));
        }

        if (key > 0 && Once(caller, "key" + key))
        {
            AcceptedKey(_logger, caller, key - 1);
        }
    }

    private bool Once(string caller, string how) => _reported.Count < MaxReported && _reported.TryAdd((caller, how), 0);

    private static string Truncate(string name) => name.Length > 64 ? name[..64] : name;

    [LoggerMessage(1378, LogLevel.Warning,
        "Accepted a v1 signature from service '{Caller}' (PersistentCallOptions.LegacySignatures is {Setting}): v1 does not name the callee, so a call " +
        "captured on its way to one service can be sent to another. Finish the upgrade and set LegacySignatures back to Refuse (docs/upgrades.md). Logged once per caller")]
    private static partial void AcceptedV1(ILogger logger, string caller, LegacySignatures setting);

    [LoggerMessage(1379, LogLevel.Information,
        "Service '{Caller}' signs with PersistentCallOptions.AcceptedPeerKeys[{Index}], not with this service's PeerKey: a key rotation is under way " +
        "(docs/calls.md). Logged once per caller and key")]
    private static partial void AcceptedKey(ILogger logger, string caller, int index);

    [LoggerMessage(1380, LogLevel.Warning,
        "Service '{Caller}' signs its calls to this service for '{Callee}', not for this service's ServiceName: accepted as v1, which names no callee, " +
        "but refused once it signs v2. Give its client the callee's name (AddPersistentCalls(\"<this service's ServiceName>\")) before the next step of " +
        "the upgrade (docs/upgrades.md). Logged once per caller and name")]
    private static partial void SignedForAnotherCallee(ILogger logger, string caller, string callee);
}
