using System.Diagnostics;
using System.Security.Cryptography;
using PersistentServices.Sessions;

namespace PersistentServices.Diagnostics;

/// <summary>
/// The library's one <see cref="ActivitySource"/>, named like the meter (<c>PersistentServices</c>): a persistent
/// request's admission outcome, its log append, the force it waits for and the send of its reply; a duplicate served
/// from the buffered reply; a session's replay. Activities exist only while someone listens. Session ids are bearer
/// secrets for anonymous sessions, so tags carry <see cref="SessionTag"/>, a short hash, never the id.
/// </summary>
internal static class PersistentServicesTracing
{
    public const string SourceName = PersistentServicesTelemetry.ActivitySourceName;

    public static readonly ActivitySource Source = new(SourceName, typeof(PersistentServicesTracing).Assembly.GetName().Version?.ToString());

    /// <summary>Tag names.</summary>
    public const string SessionTagName = "persistentservices.session";
    public const string SequenceTagName = "persistentservices.sequence";
    public const string AdmissionTagName = "persistentservices.admission";
    public const string LsnTagName = "persistentservices.lsn";

    /// <summary>12 hex digits of a SHA-256 of the session id: enough to follow one session through traces, useless to use it.</summary>
    public static string SessionTag(SessionId id)
    {
        Span<byte> bytes = stackalloc byte[16];
        System.Buffers.Binary.BinaryPrimitives.WriteUInt128BigEndian(bytes, id.Value);
        Span<byte> hash = stackalloc byte[32];
        SHA256.HashData(bytes, hash);
        return Convert.ToHexStringLower(hash[..6]);
    }
}
