using System.Runtime.InteropServices;
using Google.Protobuf;
using PersistentServices.Log;
using PersistentServices.Log.Records;

namespace PersistentServices.Sessions;

/// <summary>
/// Replies kept in the log instead of memory ([Phoenix/App §4.4]): written in full into their <c>ReplySent</c> record
/// (the body split into <c>ReplyBodyPart</c> records before it when the whole would not fit one record), read back
/// exactly, verified against the logged hash, when a duplicate needs one, and copied forward when an idle session's
/// checkpoint lets the log before them go.
/// </summary>
internal static class ReplyStore
{
    /// <summary>Bytes of a body part record besides its data: session id, sequence, field tags and lengths.</summary>
    private const int PartOverheadBytes = 64;

    /// <summary>
    /// Puts <paramref name="reply"/> in full into <paramref name="record"/>, appending body parts first when the record
    /// would not fit. False when it cannot be logged in full (its headers alone do not fit a record): it stays in memory.
    /// </summary>
    public static bool TryAttachFullReply(DurableLog log, ReplySent record, BufferedReply reply)
    {
        var full = new LoggedReply { StatusCode = reply.StatusCode, Body = UnsafeByteOperations.UnsafeWrap(reply.Body) };
        foreach (var (name, values) in reply.Headers)
        {
            var header = new LoggedHeader { Name = name };
            header.Values.Add(values);
            full.Headers.Add(header);
        }

        record.FullReply = full;
        var limit = log.MaxRecordBytes;
        if (record.CalculateSize() <= limit)
        {
            return true;
        }

        full.Body = ByteString.Empty;
        var partBytes = limit - PartOverheadBytes;
        var parts = (reply.Body.Length + partBytes - 1) / partBytes;
        if (record.CalculateSize() + parts * 11 > limit)
        {
            record.FullReply = null;
            return false;
        }

        for (var offset = 0; offset < reply.Body.Length; offset += partBytes)
        {
            var part = new ReplyBodyPart
            {
                SessionId = record.SessionId,
                Sequence = record.Sequence,
                Data = UnsafeByteOperations.UnsafeWrap(reply.Body.AsMemory(offset, Math.Min(partBytes, reply.Body.Length - offset))),
            };
            record.BodyPartLsns.Add(log.Append(RecordKind.ReplyBodyPart, part, RecordFlags.SkippableIfUnknown));
        }

        return true;
    }

    /// <summary>
    /// Where <paramref name="record"/>, appended at <paramref name="lsn"/> with a full reply, holds it;
    /// <paramref name="recordBytes"/> is the record's size (the parts add about a record each).
    /// </summary>
    public static ReplyLocation LocationOf(ReplySent record, long lsn, int recordBytes, int maxRecordBytes)
        => new(lsn, record.BodyPartLsns.Count > 0 ? record.BodyPartLsns[0] : lsn, recordBytes + (long)record.BodyPartLsns.Count * maxRecordBytes);

    /// <summary>
    /// Reads the reply at <paramref name="location"/>: exactly the status, headers and body logged (each record verified by
    /// the log: CRC-32C and its own LSN; a record of the wrong kind is corruption and names the LSN).
    /// </summary>
    public static async Task<BufferedReply> ReadAsync(DurableLog log, ReplyLocation location, CancellationToken cancellationToken)
    {
        var (record, sent, full) = await ReadHolderAsync(log, location, cancellationToken).ConfigureAwait(false);
        byte[] body;
        if (sent.BodyPartLsns.Count == 0)
        {
            body = ArrayOf(full.Body);
        }
        else
        {
            var parts = new List<ByteString>(sent.BodyPartLsns.Count);
            var length = 0;
            foreach (var partLsn in sent.BodyPartLsns)
            {
                var part = (await ReadPartAsync(log, partLsn, sent, cancellationToken).ConfigureAwait(false)).Parse(ReplyBodyPart.Parser);
                parts.Add(part.Data);
                length += part.Data.Length;
            }

            body = new byte[length];
            var at = 0;
            foreach (var part in parts)
            {
                part.Span.CopyTo(body.AsSpan(at));
                at += part.Length;
            }
        }

        // Every record was verified (CRC-32C and its own LSN), and the parts are the ones the verified record lists, in its
        // order: the bytes are the ones logged, so the logged hash is theirs without hashing them again.
        return new BufferedReply(full.StatusCode, [.. full.Headers.Select(h => new KeyValuePair<string, string[]>(h.Name, [.. h.Values]))], body, sent.ReplyHash.ToByteArray())
        {
            Location = location,
        };
    }

    /// <summary>
    /// Appends a copy of the reply at <paramref name="location"/> (its parts, then its record, byte for byte) and returns
    /// where the copy is: an idle session's checkpoint then references the copy, and the log before it can go.
    /// </summary>
    public static async Task<ReplyLocation> RelocateAsync(DurableLog log, ReplyLocation location, CancellationToken cancellationToken)
    {
        var (record, sent, _) = await ReadHolderAsync(log, location, cancellationToken).ConfigureAwait(false);
        if (sent.BodyPartLsns.Count == 0)
        {
            var lsn = log.Append(RecordKind.Reply, record.Body.Span);
            return new ReplyLocation(lsn, lsn, location.LogBytes);
        }

        var copies = new List<long>(sent.BodyPartLsns.Count);
        foreach (var partLsn in sent.BodyPartLsns)
        {
            var part = await ReadPartAsync(log, partLsn, sent, cancellationToken).ConfigureAwait(false);
            copies.Add(log.Append(RecordKind.ReplyBodyPart, part.Body.Span, RecordFlags.SkippableIfUnknown));
        }

        sent.BodyPartLsns.Clear();
        sent.BodyPartLsns.Add(copies);
        var copy = log.Append(RecordKind.Reply, sent);
        return new ReplyLocation(copy, copies[0], location.LogBytes);
    }

    private static async Task<(LogRecord Record, ReplySent Sent, LoggedReply Full)> ReadHolderAsync(DurableLog log, ReplyLocation location, CancellationToken cancellationToken)
    {
        // A copy an idle checkpoint just appended may not be durable yet.
        if (location.Lsn >= log.DurableUntil)
        {
            await log.WaitUntilDurableAsync(location.Lsn, cancellationToken).ConfigureAwait(false);
        }

        var record = await log.ReadAsync(location.Lsn, cancellationToken).ConfigureAwait(false);
        if (record.Kind != RecordKind.Reply)
        {
            throw new LogCorruptionException($"A reply kept in the log should be at LSN {location.Lsn}, but that record is a {record.Kind}.", location.Lsn);
        }

        var sent = record.Parse(ReplySent.Parser);
        if (sent.FullReply is not { } full)
        {
            throw new LogCorruptionException($"The reply record at LSN {location.Lsn} does not hold the reply in full.", location.Lsn);
        }

        return (record, sent, full);
    }

    private static async Task<LogRecord> ReadPartAsync(DurableLog log, long lsn, ReplySent sent, CancellationToken cancellationToken)
    {
        var record = await log.ReadAsync(lsn, cancellationToken).ConfigureAwait(false);
        if (record.Kind != RecordKind.ReplyBodyPart)
        {
            throw new LogCorruptionException($"A part of the reply of request {sent.Sequence} should be at LSN {lsn}, but that record is a {record.Kind}.", lsn);
        }

        return record;
    }

    /// <summary>The bytes of a parsed field without another copy (the parser gave it an array of its own).</summary>
    private static byte[] ArrayOf(ByteString bytes)
        => MemoryMarshal.TryGetArray(bytes.Memory, out var segment) && segment.Offset == 0 && segment.Count == segment.Array!.Length
            ? segment.Array
            : bytes.ToByteArray();
}
