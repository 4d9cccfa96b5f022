using System.Text;
using PersistentServices.Calls;

namespace PersistentServices.AspNetCore.Tests.Calls;

/// <summary>
/// The signature's wire format (docs/calls.md, "Who may call"): <c>v1</c> byte for byte as versions before issue 32 made
/// it (so a rolling upgrade can sign and verify it), <c>v2</c> pinned (so a later change cannot silently break a
/// deployment of this version), and a header that is anything else refused.
/// </summary>
public sealed class PeerSignatureTests
{
    private static readonly byte[] Key = Encoding.UTF8.GetBytes("known-vector-peer-key-0123456789abcdef");
    private static readonly byte[] Body = Encoding.UTF8.GetBytes("""{"account":"x","amount":1}""");
    private const long Time = 1767225600123;

    private static readonly PeerMessage Message = new("POST", "/bank/credit?x=1", "A", "B", "AAAAAAAAAAAAAAAAAAAAAA", "7", "persistent", "A=2.4096",
        "application/json; charset=utf-8");

    /// <summary>The vectors were computed outside .NET (Python's hmac) from the layouts in <see cref="PeerSignature"/>'s summary.</summary>
    [Theory]
    [InlineData("v1", "6fa71ba8620a4259e6f5ce1d376bd52b7a444f9de72cc8fc672244a87e19f27e")]
    [InlineData("v2", "94e2cf242e0527d803ba488b351fb43eeb5e307433bb5b06e2c782896492b5de")]
    public void Sign_MatchesTheKnownVector(string version, string mac)
        => Assert.Equal($"t={Time},{version}={mac}", PeerSignature.Sign(Key, Time, version, Message, Body));

    /// <summary>v1 covers neither the callee nor the content type (why v2 exists); v2 covers both.</summary>
    [Fact]
    public void Sign_V2CoversCalleeAndContentType_V1DoesNot()
    {
        var otherCallee = Message with { Callee = "C" };
        var otherType = Message with { ContentType = "text/plain" };

        Assert.Equal(PeerSignature.Sign(Key, Time, PeerSignature.V1, Message, Body), PeerSignature.Sign(Key, Time, PeerSignature.V1, otherCallee, Body));
        Assert.Equal(PeerSignature.Sign(Key, Time, PeerSignature.V1, Message, Body), PeerSignature.Sign(Key, Time, PeerSignature.V1, otherType, Body));
        Assert.NotEqual(PeerSignature.Sign(Key, Time, PeerSignature.V2, Message, Body), PeerSignature.Sign(Key, Time, PeerSignature.V2, otherCallee, Body));
        Assert.NotEqual(PeerSignature.Sign(Key, Time, PeerSignature.V2, Message, Body), PeerSignature.Sign(Key, Time, PeerSignature.V2, otherType, Body));
    }

    /// <summary>A v1 MAC relabelled v2 (or the reverse) never verifies: the two formats hash different inputs.</summary>
    [Fact]
    public void Matches_AMacOfOneVersion_NeverVerifiesAsTheOther()
    {
        foreach (var (made, taken) in new[] { (PeerSignature.V1, PeerSignature.V2), (PeerSignature.V2, PeerSignature.V1) })
        {
            var header = PeerSignature.Sign(Key, Time, made, Message, Body);
            var parsed = PeerSignature.Parse(header, out _)!.Value;
            var bodyHash = System.Security.Cryptography.SHA256.HashData(Body);
            Assert.True(PeerSignature.Matches(Key, Time, made, Message, bodyHash, parsed.Mac));
            Assert.False(PeerSignature.Matches(Key, Time, taken, Message, bodyHash, parsed.Mac));
        }
    }

    [Theory]
    [InlineData(null, "no PS-Signature header")]
    [InlineData("", "no PS-Signature header")]
    [InlineData("v2=94e2cf242e0527d803ba488b351fb43eeb5e307433bb5b06e2c782896492b5de", "malformed PS-Signature")]
    [InlineData("t=-1,v2=94e2cf242e0527d803ba488b351fb43eeb5e307433bb5b06e2c782896492b5de", "malformed PS-Signature")]
    [InlineData("t=99999999999999999999,v2=94e2cf242e0527d803ba488b351fb43eeb5e307433bb5b06e2c782896492b5de", "malformed PS-Signature")]
    [InlineData("t=1,v3=94e2cf242e0527d803ba488b351fb43eeb5e307433bb5b06e2c782896492b5de", "malformed signature")]
    [InlineData("t=1,v2=94e2cf", "malformed signature")]
    [InlineData("t=1,v2=94e2cf242e0527d803ba488b351fb43eeb5e307433bb5b06e2c782896492b5dez", "malformed signature")]
    [InlineData("t=1,v2=94e2cf242e0527d803ba488b351fb43eeb5e307433bb5b06e2c782896492b5de,v1=6fa71ba8620a4259e6f5ce1d376bd52b7a444f9de72cc8fc672244a87e19f27e", "malformed signature")]
    public void Parse_AnythingButOneSignature_IsRefused(string? header, string reason)
    {
        Assert.Null(PeerSignature.Parse(header, out var error));
        Assert.Contains(reason, error, StringComparison.Ordinal);
    }
}
