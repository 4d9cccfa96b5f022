using Google.Protobuf;
using PersistentServices.Tests.TestSupport;
using PersistentServices.Log;
using PersistentServices.Log.Records;
using PersistentServices.Recovery;
using PersistentServices.Sessions;

namespace PersistentServices.Core.Tests.Recovery;

/// <summary>Replay's reader of a logged request builds exactly the message the generated parser builds.</summary>
public sealed class ReplayRequestReaderTests
{
    private static LogRecord Record(byte[] body, long lsn = 8192) => LogRecords.Of(RecordKind.Request, body, lsn);

    private static LoggedRequest Full(long sequence, string path) => new()
    {
        SessionId = ByteString.CopyFrom(SessionId.NewRandom().ToBytes()),
        Sequence = sequence,
        Method = "POST",
        Scheme = "https",
        Host = "shop.example:8443",
        PathBase = "/api",
        Path = path,
        QueryString = "?q=ä&x=1",
        Headers =
        {
            new LoggedHeader { Name = "Content-Type", Values = { "application/json; charset=utf-8" } },
            new LoggedHeader { Name = "X-Many", Values = { "a", "", "c" } },
            new LoggedHeader { Name = "X-None" },
            new LoggedHeader { Name = "PS-Seq", Values = { sequence.ToString(System.Globalization.CultureInfo.InvariantCulture) } },
            new LoggedHeader { Name = "X-Long", Values = { new string('z', 500) } },
        },
        Body = ByteString.CopyFrom(Enumerable.Range(0, 3000).Select(i => (byte)i).ToArray()),
        ReceivedAtUnixMs = 1_763_900_000_123,
        Endpoint = "HTTP: POST /api/items/{id}",
        User = new LoggedPrincipal
        {
            AuthenticationType = "Bearer",
            NameClaimType = "name",
            RoleClaimType = "role",
            Claims = { new LoggedClaim { Type = "name", Value = "ana", ValueType = "string", Issuer = "idp" } },
        },
        RemoteIp = "::1",
        RequestHash = ByteString.CopyFrom(Enumerable.Range(0, 32).Select(i => (byte)(i * 7)).ToArray()),
        CanHaveBody = true,
        RequestHashVersion = 2,
        Dv = new LoggedDependencyVector { Entries = { new LoggedDependency { Service = "b", Epoch = 3, Lsn = 4096 } } },
    };

    [Fact]
    public void Read_EveryField_EqualsTheGeneratedParser_AndRepeatedStringsAreShared()
    {
        var one = Full(1, "/items/1");
        var two = Full(2, "/items/2");

        var first = ReplayRequestReader.Read(Record(one.ToByteArray()));
        var second = ReplayRequestReader.Read(Record(two.ToByteArray()));

        Assert.Equal(LoggedRequest.Parser.ParseFrom(one.ToByteArray()), first);
        Assert.Equal(one, first);
        Assert.Equal(two, second);
        Assert.Same(first.Headers[0].Values[0], second.Headers[0].Values[0]);
        Assert.Same(first.Endpoint, second.Endpoint);
    }

    [Fact]
    public void Read_AnEmptyMessageAndOneOfTheFirstBuilds_EqualTheGeneratedParser()
    {
        Assert.Equal(new LoggedRequest(), ReplayRequestReader.Read(Record([])));

        var old = new LoggedRequest { SessionId = ByteString.CopyFrom(new byte[16]), Sequence = 7, Method = "GET", Path = "/a\nb" };
        Assert.Equal(old, ReplayRequestReader.Read(Record(old.ToByteArray())));
    }

    [Fact]
    public void Read_FieldsALaterBuildAdded_AreSkipped()
    {
        var request = Full(5, "/x");
        var output = new MemoryStream();
        var writer = new CodedOutputStream(output);
        request.WriteTo(writer);
        writer.WriteTag(40, WireFormat.WireType.LengthDelimited);
        writer.WriteString("a field of a later build");
        writer.WriteTag(41, WireFormat.WireType.Varint);
        writer.WriteInt64(12);
        writer.WriteTag(LoggedRequest.SequenceFieldNumber, WireFormat.WireType.Fixed64); // a known number, another type
        writer.WriteFixed64(99);
        writer.Flush();

        var read = ReplayRequestReader.Read(Record(output.ToArray()));

        Assert.Equal(request, read);
    }

    [Fact]
    public void Read_ATruncatedMessage_IsALogFormatErrorNamingTheLsn()
    {
        var bytes = Full(1, "/items/1").ToByteArray();

        var error = Assert.Throws<LogFormatException>(() => ReplayRequestReader.Read(Record(bytes[..(bytes.Length - 10)], lsn: 123_456)));

        Assert.Contains("123456", error.Message, StringComparison.Ordinal);
    }
}
