using System.Security.Cryptography;
using System.Text;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;
using PersistentServices.Calls;
using PersistentServices.Hosting;

namespace PersistentServices.Http.IdempotencyKeys;

/// <summary>
/// Decides whether an <c>Idempotency-Key</c> is one a gateway of the deployment generated (<see cref="GatewayKeySignature"/>):
/// a <c>v2</c> signature with <see cref="PersistentCallOptions.PeerKey"/> or one of <see cref="PersistentCallOptions.AcceptedPeerKeys"/>,
/// at most <see cref="PersistentCallOptions.SignatureWindow"/> old and <see cref="PersistentCallOptions.SignatureFutureSkew"/>
/// ahead. Anything else fails closed: the key is the client's own (its principal's or its address's share, the long retention).
/// A failed signature is logged as a warning once per reason, then at debug level. A DI singleton.
/// </summary>
internal sealed partial class GatewayKeyTrust
{
    private readonly PersistentCallOptions _options;
    private readonly TimeProvider _time;
    private readonly ILogger _logger;
    private readonly byte[][] _keys;
    private int _warned;

    public GatewayKeyTrust(PersistentRuntime runtime, ILoggerFactory loggers)
    {
        _options = runtime.Options.Calls;
        _time = runtime.Time;
        _logger = loggers.CreateLogger("PersistentServices.IdempotencyKeys");
        _keys = _options.PeerKey is { } key ? [Encoding.UTF8.GetBytes(key), .. _options.AcceptedPeerKeys.Select(k => Encoding.UTF8.GetBytes(k))] : [];
    }

    /// <summary>True when the request carries a valid gateway signature over <paramref name="key"/>.</summary>
    public bool Generated(HttpRequest request, string key)
    {
        var header = request.Headers[GatewayKeySignature.Header];
        if (header.Count == 0)
        {
            return false;
        }

        var why = Verify(header.Count == 1 ? header[0] : null, request, key);
        if (why is null)
        {
            return true;
        }

        if (Interlocked.Exchange(ref _warned, 1) == 0)
        {
            SignatureRefused(_logger, why);
        }
        else
        {
            SignatureRefusedAgain(_logger, why);
        }

        return false;
    }

    private string? Verify(string? header, HttpRequest request, string key)
    {
        if (_keys.Length == 0)
        {
            return "this service has no PersistentServicesOptions.Calls.PeerKey to verify it with: set the gateway's PeerKey there too";
        }

        if (PeerSignature.Parse(header, out var error) is not { } signature)
        {
            return error;
        }

        if (signature.Version != PeerSignature.V2)
        {
            return "not a v2 signature";
        }

        var age = _time.GetUtcNow() - DateTimeOffset.FromUnixTimeMilliseconds(Math.Clamp(signature.UnixMs, 0, 253_402_300_799_999));
        if (age > _options.SignatureWindow || -age > _options.SignatureFutureSkew)
        {
            return $"a timestamp {age.TotalSeconds:0.###} s old, outside PersistentCallOptions.SignatureWindow and SignatureFutureSkew (a replayed request, or clocks apart)";
        }

        var message = GatewayKeySignature.Message(request.Method, string.Concat(request.PathBase.Value, request.Path.Value, request.QueryString.Value), key);
        Span<byte> bodyHash = stackalloc byte[32];
        SHA256.HashData([], bodyHash);
        foreach (var candidate in _keys)
        {
            if (PeerSignature.Matches(candidate, signature.UnixMs, signature.Version, message, bodyHash, signature.Mac))
            {
                return null;
            }
        }

        return "a signature that matches neither PeerKey nor AcceptedPeerKeys (another key, or a changed request)";
    }

    [LoggerMessage(1154, LogLevel.Warning,
        "An Idempotency-Key request carries a gateway's signature (PS-Gateway-Signature) that this service does not accept: {Reason}. Its key is taken for the client's own " +
        "(counted in the client's share, kept for IdempotencyKeys.Retention). Logged once, then at debug level")]
    private static partial void SignatureRefused(ILogger logger, string reason);

    [LoggerMessage(1155, LogLevel.Debug, "An Idempotency-Key request's gateway signature was not accepted: {Reason}")]
    private static partial void SignatureRefusedAgain(ILogger logger, string reason);
}
