using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;

namespace PersistentServices.Recovery;

/// <summary>
/// The fields of a logged request (<see cref="LoggedRequest"/>) the analysis scan needs: whose request it is, its number,
/// its identity and when it arrived. Read straight from the protobuf wire format, skipping the rest (headers, body,
/// principal): the scan visits every request since the scan start, and most are superseded by a later session checkpoint
/// before it ends, so parsing them whole (strings, lists) was most of the scan's time and garbage. Replay parses the
/// requests it runs in full.
/// </summary>
internal readonly record struct RequestHead(SessionId SessionId, long Sequence, byte[] RequestHash, int RequestHashVersion, long ReceivedAtUnixMs)
{
    // Field numbers in records.proto (LoggedRequest).
    private const int SessionIdField = LoggedRequest.SessionIdFieldNumber;
    private const int SequenceField = LoggedRequest.SequenceFieldNumber;
    private const int ReceivedAtField = LoggedRequest.ReceivedAtUnixMsFieldNumber;
    private const int RequestHashField = LoggedRequest.RequestHashFieldNumber;
    private const int RequestHashVersionField = LoggedRequest.RequestHashVersionFieldNumber;

    // Runs for every request the scan visits: optimized at once, not first as tier-0 code (recovery time).
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
    public static RequestHead Read(LogRecord record)
    {
        var body = record.Body.Span;
        ReadOnlySpan<byte> sessionId = default;
        ReadOnlySpan<byte> hash = default;
        long sequence = 0, receivedAt = 0, hashVersion = 0;
        var at = 0;
        while (at < body.Length)
        {
            var tag = ReadVarint(body, ref at, record.Lsn);
            var field = (int)(tag >> 3);
            var wireType = (int)(tag & 7);
            switch (wireType)
            {
                case 0:
                    var value = (long)ReadVarint(body, ref at, record.Lsn);
                    switch (field)
                    {
                        case SequenceField: sequence = value; break;
                        case ReceivedAtField: receivedAt = value; break;
                        case RequestHashVersionField: hashVersion = (uint)value; break;
                    }

                    break;
                case 1:
                    Skip(body, ref at, 8, record.Lsn);
                    break;
                case 2:
                    var length = ReadVarint(body, ref at, record.Lsn);
                    if (length > (ulong)(body.Length - at))
                    {
                        throw Malformed(record.Lsn);
                    }

                    var bytes = body.Slice(at, (int)length);
                    at += (int)length;
                    if (field == SessionIdField)
                    {
                        sessionId = bytes;
                    }
                    else if (field == RequestHashField)
                    {
                        hash = bytes;
                    }

                    break;
                case 5:
                    Skip(body, ref at, 4, record.Lsn);
                    break;
                default:
                    throw Malformed(record.Lsn);
            }
        }

        return new RequestHead(SessionId.FromBytes(sessionId), sequence, hash.ToArray(), (int)hashVersion, receivedAt);
    }

    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveInlining)]
    private static ulong ReadVarint(ReadOnlySpan<byte> body, ref int at, long lsn)
    {
        ulong result = 0;
        for (var shift = 0; shift < 64; shift += 7)
        {
            if (at >= body.Length)
            {
                throw Malformed(lsn);
            }

            var b = body[at++];
            result |= (ulong)(b & 0x7F) << shift;
            if (b < 0x80)
            {
                return result;
            }
        }

        throw Malformed(lsn);
    }

    private static void Skip(ReadOnlySpan<byte> body, ref int at, int count, long lsn)
    {
        if (body.Length - at < count)
        {
            throw Malformed(lsn);
        }

        at += count;
    }

    private static LogFormatException Malformed(long lsn) =>
        new($"The request record at LSN {lsn} is not a valid LoggedRequest message (its checksum is intact: a build wrote what it cannot read).");
}
