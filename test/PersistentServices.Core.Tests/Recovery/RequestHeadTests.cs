using Google.Protobuf;
using PersistentServices.Tests.TestSupport;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Recovery;
using PersistentServices.Sessions;

namespace PersistentServices.Core.Tests.Recovery;

/// <summary>The analysis scan's reading of a logged request's and reply's head fields agrees with a full parse.</summary>
public sealed class RequestHeadTests
{
    private static LogRecord Record(LoggedRequest request) => Record(RecordKind.Request, request.ToByteArray());

    private static LogRecord Reply(ReplySent reply) => Record(RecordKind.Reply, reply.ToByteArray());

    private static LogRecord Record(RecordKind kind, byte[] body, long lsn = 8192) => LogRecords.Of(kind, body, lsn);

    [Fact]
    public void Read_AFullRequest_GivesTheFieldsAFullParseGives()
    {
        var id = SessionId.NewRandom();
        var request = new LoggedRequest
        {
            SessionId = ByteString.CopyFrom(id.ToBytes()),
            Sequence = 300_000_000_000,
            Method = "POST",
            Path = "/a\nb",
            Body = ByteString.CopyFrom(new byte[5000]),
            ReceivedAtUnixMs = 1_763_900_000_123,
            Endpoint = "HTTP: POST /a",
            RequestHash = ByteString.CopyFrom(Enumerable.Range(0, 32).Select(i => (byte)i).ToArray()),
            RequestHashVersion = 2,
            CanHaveBody = true,
            User = new LoggedPrincipal { AuthenticationType = "test", Claims = { new LoggedClaim { Type = "name", Value = "x" } } },
            Dv = new LoggedDependencyVector(),
        };
        request.Headers.Add(new LoggedHeader { Name = "Content-Type", Values = { "application/json" } });

        var head = RequestHead.Read(Record(request));

        Assert.Equal(id, head.SessionId);
        Assert.Equal(request.Sequence, head.Sequence);
        Assert.Equal(request.ReceivedAtUnixMs, head.ReceivedAtUnixMs);
        Assert.Equal(request.RequestHash.ToByteArray(), head.RequestHash);
        Assert.Equal(2, head.RequestHashVersion);
    }

    [Fact]
    public void Read_ARequestOfTheFirstBuilds_HasHashVersionZero()
    {
        var id = SessionId.NewRandom();
        var head = RequestHead.Read(Record(new LoggedRequest { SessionId = ByteString.CopyFrom(id.ToBytes()), Sequence = 1, RequestHash = ByteString.CopyFrom(new byte[32]) }));

        Assert.Equal(id, head.SessionId);
        Assert.Equal(1, head.Sequence);
        Assert.Equal(0, head.RequestHashVersion);
    }

    [Fact]
    public void Read_ATruncatedBody_ThrowsLogFormatException()
    {
        var body = new LoggedRequest { SessionId = ByteString.CopyFrom(SessionId.NewRandom().ToBytes()), Sequence = 7, Body = ByteString.CopyFrom(new byte[100]) }.ToByteArray();
        var cut = body[..^10];
        var entry = new byte[RecordEnvelope.HeaderSize + cut.Length];
        RecordEnvelope.Write(entry, 4096, RecordKind.Request, RecordFlags.None, cut);

        Assert.Throws<LogFormatException>(() => RequestHead.Read(LogRecord.FromEntry(entry, entry.Length, 4096)));
    }

    [Fact]
    public void ReplyHead_OfAShortReply_GivesTheFieldsAFullParseGives()
    {
        var id = SessionId.NewRandom();
        var reply = new ReplySent
        {
            SessionId = ByteString.CopyFrom(id.ToBytes()),
            Sequence = 300_000_000_000,
            StatusCode = 201,
            ReplyHash = ByteString.CopyFrom(Enumerable.Range(0, 32).Select(i => (byte)(i * 3)).ToArray()),
            RequestLsn = 123_456,
        };

        var head = ReplyHead.Read(Reply(reply));

        Assert.Equal(id, head.SessionId);
        Assert.Equal(reply.Sequence, head.Sequence);
        Assert.Equal(201, head.StatusCode);
        Assert.Equal(reply.ReplyHash.ToByteArray(), head.ReplyHash);
        Assert.False(head.HasFullReply);
    }

    [Fact]
    public void ReplyHead_OfAReplyKeptInTheLog_SaysSo()
    {
        var whole = new ReplySent { SessionId = ByteString.CopyFrom(SessionId.NewRandom().ToBytes()), Sequence = 2, StatusCode = 200, FullReply = new LoggedReply { StatusCode = 200 } };
        var parted = new ReplySent { SessionId = ByteString.CopyFrom(SessionId.NewRandom().ToBytes()), Sequence = 3, StatusCode = 200, BodyPartLsns = { 4096, 8192 } };

        Assert.True(ReplyHead.Read(Reply(whole)).HasFullReply);
        Assert.True(ReplyHead.Read(Reply(parted)).HasFullReply);
        Assert.Equal(2, ReplyHead.Read(Reply(whole)).Sequence);
    }

    [Fact]
    public void ReplyHead_OfATruncatedBody_ThrowsLogFormatException()
    {
        var body = new ReplySent { SessionId = ByteString.CopyFrom(SessionId.NewRandom().ToBytes()), Sequence = 7, ReplyHash = ByteString.CopyFrom(new byte[32]) }.ToByteArray();

        Assert.Throws<LogFormatException>(() => ReplyHead.Read(Record(RecordKind.Reply, body[..^10], lsn: 4096)));
    }
}
