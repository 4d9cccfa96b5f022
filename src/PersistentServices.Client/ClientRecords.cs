using System.Text;

namespace PersistentServices.Client;

/// <summary>The kinds of the client store's records (docs/client.md, "The store").</summary>
internal enum ClientRecordType : byte
{
    /// <summary>A request, stored (and forced) before it is first sent; again with a new session when its first attempt found no session.</summary>
    Request = 1,

    /// <summary>
    /// The reply to a request resent by RecoverAsync, forced before the session takes its next request (which acknowledges
    /// it to the service) and before it is handed over. A live call writes no Reply record: its Delivered record is forced
    /// before both.
    /// </summary>
    Reply = 2,

    /// <summary>The application has the reply: the entry is done. Forced before the reply is handed over (at most once) and, on a live call, before its session takes another request.</summary>
    Delivered = 3,

    /// <summary>The entry is given up (<see cref="PersistentRequestOutcomeUnknownException"/>, or a body over the limit).</summary>
    Abandoned = 4,

    /// <summary>
    /// An idle session was ended at its service when the client stopped: the next start does not take it up. Written by
    /// builds after the first client release; an older build refuses a store holding one (unknown type).
    /// </summary>
    SessionClosed = 5,

    /// <summary>
    /// The finished operation ids the store remembers (oldest first, each with how it finished), written before the log is
    /// truncated so that they outlive the Delivered and Abandoned records they came from. Written by builds after the
    /// second client release; an older build refuses a store holding one (unknown type).
    /// </summary>
    FinishedOperations = 6,
}

/// <summary>An operation id the store remembers as finished: its reply handed over (<c>true</c>) or its outcome reported unknown.</summary>
internal readonly record struct FinishedOperation(string OperationId, bool ReplyHandedOver);

/// <summary>A stored request: where it goes, in which session, with which number.</summary>
internal sealed record StoredRequest(
    long EntryId, string SessionId, long Sequence, string Method, string Uri, string? OperationId, IReadOnlyList<KeyValuePair<string, string>> Headers, byte[]? Body);

/// <summary>A stored reply, as the service sent it.</summary>
internal sealed record StoredReply(long EntryId, int StatusCode, IReadOnlyList<KeyValuePair<string, string>> Headers, byte[] Body);

/// <summary>
/// The client store's record bodies, inside the log's <c>RECORD_KIND_PAYLOAD</c> records (the log's envelope carries the
/// LSN and a CRC-32C). Layout: a format version byte (1), the type byte, then the fields little-endian, strings as
/// length-prefixed UTF-8 (<see cref="BinaryWriter"/>). A record of a newer format stops the store from opening.
/// </summary>
internal static class ClientRecords
{
    public const byte FormatVersion = 1;

    public static byte[] Encode(StoredRequest request)
        => Write(ClientRecordType.Request, w =>
        {
            w.Write(request.EntryId);
            w.Write(request.SessionId);
            w.Write(request.Sequence);
            w.Write(request.Method);
            w.Write(request.Uri);
            w.Write(request.OperationId ?? "");
            WriteHeaders(w, request.Headers);
            WriteBody(w, request.Body);
        });

    public static byte[] Encode(StoredReply reply)
        => Write(ClientRecordType.Reply, w =>
        {
            w.Write(reply.EntryId);
            w.Write(reply.StatusCode);
            WriteHeaders(w, reply.Headers);
            WriteBody(w, reply.Body);
        });

    public static byte[] Encode(ClientRecordType type, long entryId) => Write(type, w => w.Write(entryId));

    public static byte[] EncodeSessionClosed(string sessionId) => Write(ClientRecordType.SessionClosed, w => w.Write(sessionId));

    public static byte[] Encode(IReadOnlyList<FinishedOperation> operations)
        => Write(ClientRecordType.FinishedOperations, w =>
        {
            w.Write(operations.Count);
            foreach (var operation in operations)
            {
                w.Write(operation.OperationId);
                w.Write(operation.ReplyHandedOver);
            }
        });

    /// <summary>Reads a record body; <paramref name="lsn"/> names it in errors and stands for an entry id of 0 (the entry's first request).</summary>
    public static (ClientRecordType Type, object Value) Decode(ReadOnlySpan<byte> body, long lsn)
    {
        if (body.Length < 2)
        {
            throw new InvalidDataException($"Client store record at LSN {lsn} is {body.Length} bytes: too short.");
        }

        if (body[0] != FormatVersion)
        {
            throw new InvalidDataException($"Client store record at LSN {lsn} has format {body[0]}; this build reads format {FormatVersion}. Open the store with the build that wrote it.");
        }

        using var reader = new BinaryReader(new MemoryStream(body[2..].ToArray()), Encoding.UTF8);
        var type = (ClientRecordType)body[1];
        switch (type)
        {
            case ClientRecordType.Request:
                var entryId = reader.ReadInt64();
                return (type, new StoredRequest(
                    entryId == 0 ? lsn : entryId,
                    reader.ReadString(),
                    reader.ReadInt64(),
                    reader.ReadString(),
                    reader.ReadString(),
                    reader.ReadString() is { Length: > 0 } operation ? operation : null,
                    ReadHeaders(reader),
                    ReadBody(reader)));

            case ClientRecordType.Reply:
                return (type, new StoredReply(reader.ReadInt64(), reader.ReadInt32(), ReadHeaders(reader), ReadBody(reader) ?? []));

            case ClientRecordType.Delivered:
            case ClientRecordType.Abandoned:
                return (type, reader.ReadInt64());

            case ClientRecordType.SessionClosed:
                return (type, reader.ReadString());

            case ClientRecordType.FinishedOperations:
                var count = reader.ReadInt32();
                if (count is < 0 or > ClientStore.MaxFinishedOperationRetention)
                {
                    throw new InvalidDataException($"Client store record at LSN {lsn} holds {count} finished operations.");
                }

                var operations = new List<FinishedOperation>(count);
                for (var i = 0; i < count; i++)
                {
                    operations.Add(new FinishedOperation(reader.ReadString(), reader.ReadBoolean()));
                }

                return (type, operations);

            default:
                throw new InvalidDataException($"Client store record at LSN {lsn} has unknown type {(byte)type}.");
        }
    }

    private static byte[] Write(ClientRecordType type, Action<BinaryWriter> fields)
    {
        using var stream = new MemoryStream();
        stream.WriteByte(FormatVersion);
        stream.WriteByte((byte)type);
        using (var writer = new BinaryWriter(stream, Encoding.UTF8, leaveOpen: true))
        {
            fields(writer);
        }

        return stream.ToArray();
    }

    private static void WriteHeaders(BinaryWriter writer, IReadOnlyList<KeyValuePair<string, string>> headers)
    {
        writer.Write(headers.Count);
        foreach (var (name, value) in headers)
        {
            writer.Write(name);
            writer.Write(value);
        }
    }

    private static List<KeyValuePair<string, string>> ReadHeaders(BinaryReader reader)
    {
        var count = reader.ReadInt32();
        if (count is < 0 or > 10_000)
        {
            throw new InvalidDataException($"Client store record holds {count} headers.");
        }

        var headers = new List<KeyValuePair<string, string>>(count);
        for (var i = 0; i < count; i++)
        {
            headers.Add(new(reader.ReadString(), reader.ReadString()));
        }

        return headers;
    }

    private static void WriteBody(BinaryWriter writer, byte[]? body)
    {
        writer.Write(body?.Length ?? -1);
        if (body is not null)
        {
            writer.Write(body);
        }
    }

    private static byte[]? ReadBody(BinaryReader reader)
    {
        var length = reader.ReadInt32();
        return length < 0 ? null : reader.ReadBytes(length);
    }
}
