using System.Text;
using Microsoft.Extensions.Logging.Abstractions;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Calls;

namespace PersistentServices.AspNetCore.Tests.Calls;

/// <summary>
/// What a service accepts (docs/calls.md, "Who may call"): a signature for itself, made at most SignatureWindow ago and
/// at most SignatureFutureSkew ahead, with PeerKey or one of AcceptedPeerKeys, in v2 unless LegacySignatures accepts v1.
/// </summary>
public sealed class PeerAuthenticationTests
{
    private const string Key1 = "peer-authentication-key-one-0123456789ab";
    private const string Key2 = "peer-authentication-key-two-0123456789ab";
    private static readonly DateTimeOffset Now = new(2026, 12, 1, 12, 0, 0, TimeSpan.Zero);
    private static readonly byte[] Body = Encoding.UTF8.GetBytes("{}");
    private static readonly PeerMessage ToB = new("POST", "/pay", "A", "B", "s", "1", "persistent", "", "application/json");

    [Theory]
    [InlineData(-300_000, null)]              // the window's edge: 5 minutes old
    [InlineData(-300_001, "s old, beyond PersistentCallOptions.SignatureWindow")]
    [InlineData(5_000, null)]                 // the future skew's edge: 5 s ahead
    [InlineData(5_001, "ahead of this service's clock, beyond PersistentCallOptions.SignatureFutureSkew")]
    [InlineData(240_000, "ahead of this service's clock")] // accepted before issue 32 (within 5 minutes either way)
    public void Verify_TimestampWindowAndFutureSkew(long offsetMs, string? reason)
    {
        var b = Service("B", Key1);
        var header = Sign(Key1, PeerSignature.V2, ToB, Now.AddMilliseconds(offsetMs));

        Assert.Equal(reason is null, b.Verify(header, ToB, Body) is null);
        if (reason is not null)
        {
            Assert.Contains(reason, b.Verify(header, ToB, Body), StringComparison.Ordinal);
        }
    }

    /// <summary>A timestamp beyond what a date can hold was an unhandled exception (a 500) before: now a refusal.</summary>
    [Fact]
    public void Verify_TimestampBeyondAnyDate_IsRefused_NotAnException()
        => Assert.Contains("beyond", Service("B", Key1).Verify("t=9223372036854775807,v2=" + new string('0', 64), ToB, Body), StringComparison.Ordinal);

    [Fact]
    public void Verify_SignedForAnotherService_OrForNone_IsRefusedBeforeTheMac()
    {
        var b = Service("B", Key1);
        var toC = ToB with { Callee = "C" };

        Assert.Contains("signed for service 'C', not for this one", b.Verify(Sign(Key1, PeerSignature.V2, toC, Now), toC, Body), StringComparison.Ordinal);
        Assert.Contains("no PS-Callee header", b.Verify(Sign(Key1, PeerSignature.V2, ToB with { Callee = "" }, Now), ToB with { Callee = "" }, Body), StringComparison.Ordinal);

        // The header names B, the signature was made for C: the MAC does not match.
        Assert.Contains("does not match", b.Verify(Sign(Key1, PeerSignature.V2, toC, Now), ToB, Body), StringComparison.Ordinal);
    }

    [Fact]
    public void Verify_WithPeerKeyOrAnAcceptedKey_NotWithAnother()
    {
        var b = Service("B", Key2, o => o.Calls.AcceptedPeerKeys.Add(Key1));

        Assert.Null(b.Verify(Sign(Key1, PeerSignature.V2, ToB, Now), ToB, Body));
        Assert.Null(b.Verify(Sign(Key2, PeerSignature.V2, ToB, Now), ToB, Body));
        Assert.Contains("matches none of the 2 keys", b.Verify(Sign("peer-authentication-key-three-0123456789", PeerSignature.V2, ToB, Now), ToB, Body), StringComparison.Ordinal);
    }

    [Theory]
    [InlineData(LegacySignatures.Refuse, false)]
    [InlineData(LegacySignatures.Accept, true)]
    [InlineData(LegacySignatures.SignAndAccept, true)]
    public void Verify_V1_OnlyWhenLegacySignaturesAcceptsIt(LegacySignatures setting, bool accepted)
    {
        var b = Service("B", Key1, o => o.Calls.LegacySignatures = setting);
        var v1 = Sign(Key1, PeerSignature.V1, ToB with { Callee = "" }, Now); // an older caller names no callee

        var error = b.Verify(v1, ToB with { Callee = "" }, Body);
        Assert.Equal(accepted, error is null);
        if (!accepted)
        {
            Assert.Contains("a v1 signature", error, StringComparison.Ordinal);
        }
    }

    /// <summary>
    /// The first step of an upgrade: a caller of this version signs v1 but names its callee; a callee that is not the one
    /// named accepts it (v1 checks no callee, as before) and warns once (event 1380), since that caller's calls would be
    /// refused once it signs v2. Accepting v1 is itself reported once per caller (event 1378).
    /// </summary>
    [Fact]
    public void Verify_V1NamingAnotherCallee_AcceptedInTheUpgrade_WarnedOncePerCaller()
    {
        var log = new ListLoggerProvider();
        var options = new PersistentServicesOptions { ServiceName = "B" };
        options.Calls.PeerKey = Key1;
        options.Calls.LegacySignatures = LegacySignatures.SignAndAccept;
        var b = new PeerAuthentication(options.Calls, "B", new FakeTimeProvider(Now), log.CreateLogger("test"));
        var toBank = ToB with { Callee = "bank" };

        Assert.Null(b.Verify(Sign(Key1, PeerSignature.V1, toBank, Now), toBank, Body));
        Assert.Null(b.Verify(Sign(Key1, PeerSignature.V1, toBank, Now), toBank, Body));
        Assert.Null(b.Verify(Sign(Key1, PeerSignature.V1, ToB, Now), ToB, Body));

        Assert.Contains("signs its calls to this service for 'bank'", Assert.Single(log.Messages(1380)), StringComparison.Ordinal);
        Assert.Single(log.Messages(1378));
    }

    [Theory]
    [InlineData(LegacySignatures.Refuse, "v2")]
    [InlineData(LegacySignatures.Accept, "v2")]
    [InlineData(LegacySignatures.SignAndAccept, "v1")]
    public void Sign_UsesTheVersionLegacySignaturesSays(LegacySignatures setting, string version)
        => Assert.Contains($",{version}=", Service("A", Key1, o => o.Calls.LegacySignatures = setting).Sign(ToB, Body), StringComparison.Ordinal);

    [Fact]
    public void Verify_WithoutPeerKey_RefusesEverything()
        => Assert.Contains("no PersistentServicesOptions.Calls.PeerKey", new PeerAuthentication(new PersistentCallOptions(), "B", new FakeTimeProvider(Now), NullLogger.Instance)
            .Verify(Sign(Key1, PeerSignature.V2, ToB, Now), ToB, Body), StringComparison.Ordinal);

    private static PeerAuthentication Service(string name, string key, Action<PersistentServicesOptions>? configure = null)
    {
        var options = new PersistentServicesOptions { ServiceName = name };
        options.Calls.PeerKey = key;
        configure?.Invoke(options);
        return new PeerAuthentication(options.Calls, name, new FakeTimeProvider(Now), NullLogger.Instance);
    }

    private static string Sign(string key, string version, PeerMessage message, DateTimeOffset at)
        => PeerSignature.Sign(Encoding.UTF8.GetBytes(key), at.ToUnixTimeMilliseconds(), version, message, Body);
}
