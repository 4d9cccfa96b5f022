using System.Security.Cryptography;
using System.Text;

namespace PersistentServices.Sessions;

/// <summary>
/// The reply of a session's last request, kept so a duplicate gets it again without executing anything
/// ([MSP §3.1] "buffered reply"). Headers are the reply's own (hop-by-hop and server headers dropped).
/// </summary>
internal sealed class BufferedReply
{
    public BufferedReply(int statusCode, IReadOnlyList<KeyValuePair<string, string[]>> headers, byte[] body)
        : this(statusCode, headers, body, hash: null)
    {
    }

    /// <summary>A reply whose <paramref name="hash"/> is known (read back from a verified log record): not computed again.</summary>
    public BufferedReply(int statusCode, IReadOnlyList<KeyValuePair<string, string[]>> headers, byte[] body, byte[]? hash)
    {
        StatusCode = statusCode;
        Headers = headers;
        Body = body;
        Hash = hash ?? ComputeHash(statusCode, ContentType, body);
    }

    public int StatusCode { get; }

    public IReadOnlyList<KeyValuePair<string, string[]>> Headers { get; }

    public byte[] Body { get; }

    /// <summary>SHA-256 of the status code, Content-Type and body: what replay must reproduce.</summary>
    public byte[] Hash { get; }

    /// <summary>
    /// OnCompleted callbacks of a reply that replay finished (the crash cut its request short, so no client received it
    /// yet): they run once, with the first retry that receives the reply. Null when there are none or they were taken.
    /// </summary>
    private IReadOnlyList<(Func<object, Task> Callback, object State)>? _deferredOnCompleted;

    /// <summary>Keeps <paramref name="callbacks"/> for the first client that receives this reply.</summary>
    public void DeferOnCompleted(IReadOnlyList<(Func<object, Task> Callback, object State)> callbacks)
        => _deferredOnCompleted = callbacks.Count > 0 ? callbacks : null;

    /// <summary>The deferred OnCompleted callbacks, once: the next caller gets null.</summary>
    public IReadOnlyList<(Func<object, Task> Callback, object State)>? TakeDeferredOnCompleted()
        => Interlocked.Exchange(ref _deferredOnCompleted, null);

    /// <summary>
    /// Set when the reply was logged in full (<see cref="SessionRecords.AppendReply"/>): where the log holds it. The session
    /// then keeps only this location, not the reply.
    /// </summary>
    public ReplyLocation? Location { get; set; }

    /// <summary>What holding this reply costs in memory, as the session memory budget counts it: body, headers, objects.</summary>
    public long MemoryBytes => _memoryBytes ??= EstimateMemory();

    private long? _memoryBytes;

    /// <summary>Bytes a held reply costs besides its body and headers (this object, its lists and hash).</summary>
    internal const int ObjectOverheadBytes = 160;

    private long EstimateMemory()
    {
        long bytes = ObjectOverheadBytes + Body.Length;
        foreach (var (name, values) in Headers)
        {
            // A header pair, its array and strings (UTF-16, 24 bytes per string object).
            bytes += 64 + 2L * name.Length;
            foreach (var value in values)
            {
                bytes += 32 + 2L * (value?.Length ?? 0);
            }
        }

        return bytes;
    }

    public string? ContentType
    {
        get
        {
            for (var i = 0; i < Headers.Count; i++)
            {
                if (string.Equals(Headers[i].Key, "Content-Type", StringComparison.OrdinalIgnoreCase))
                {
                    return Headers[i].Value is [var first, ..] ? first : null;
                }
            }

            return null;
        }
    }

    /// <summary>The reply as a checkpoint logs it: whole (status, headers, body).</summary>
    public Log.Records.LoggedReply ToLogged()
    {
        var logged = new Log.Records.LoggedReply { StatusCode = StatusCode, Body = Google.Protobuf.ByteString.CopyFrom(Body) };
        foreach (var (name, values) in Headers)
        {
            var header = new Log.Records.LoggedHeader { Name = name };
            header.Values.Add(values);
            logged.Headers.Add(header);
        }

        return logged;
    }

    /// <summary>A reply read back from a checkpoint: exactly the bytes a client may have received.</summary>
    public static BufferedReply FromLogged(Log.Records.LoggedReply logged)
        => new(logged.StatusCode, [.. logged.Headers.Select(h => new KeyValuePair<string, string[]>(h.Name, [.. h.Values]))], logged.Body.ToByteArray());

    public static byte[] ComputeHash(int statusCode, string? contentType, ReadOnlySpan<byte> body)
    {
        // One-shot SHA-256 over "status \n content-type \n body": no per-call hash object.
        var typeLength = Encoding.UTF8.GetByteCount(contentType ?? "");
        var length = 4 + 1 + typeLength + 1 + body.Length;
        var rented = System.Buffers.ArrayPool<byte>.Shared.Rent(length);
        try
        {
            var buffer = rented.AsSpan(0, length);
            System.Buffers.Binary.BinaryPrimitives.WriteInt32LittleEndian(buffer, statusCode);
            buffer[4] = (byte)'\n';
            Encoding.UTF8.GetBytes(contentType ?? "", buffer[5..]);
            buffer[5 + typeLength] = (byte)'\n';
            body.CopyTo(buffer[(6 + typeLength)..]);
            return SHA256.HashData(buffer);
        }
        finally
        {
            System.Buffers.ArrayPool<byte>.Shared.Return(rented);
        }
    }
}
