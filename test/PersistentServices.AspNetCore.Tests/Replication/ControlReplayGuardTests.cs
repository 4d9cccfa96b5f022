using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Replication;

namespace PersistentServices.AspNetCore.Tests.Replication;

/// <summary>
/// <see cref="ControlReplayGuard"/> (docs/replication.md, "The protocol"): a signed control message is taken once while
/// its signature is valid; after the window it is forgotten (the signature check refuses it then); past its bound it
/// refuses (fails closed) until entries expire.
/// </summary>
public sealed class ControlReplayGuardTests
{
    [Fact]
    public void ASignature_IsTakenOnce_AndForgottenAfterTheWindow()
    {
        var time = new FakeTimeProvider(DateTimeOffset.Parse("2026-12-07T07:00:00Z", System.Globalization.CultureInfo.InvariantCulture));
        var guard = new ControlReplayGuard(time, TimeSpan.FromMinutes(5));

        Assert.True(guard.FirstTime("v2;t=1;mac=a"));
        Assert.False(guard.FirstTime("v2;t=1;mac=a"));
        Assert.True(guard.FirstTime("v2;t=1;mac=b"));
        time.Advance(TimeSpan.FromMinutes(4));
        Assert.False(guard.FirstTime("v2;t=1;mac=a"));
        time.Advance(TimeSpan.FromMinutes(2));
        // Past the window the guard no longer needs it: a message this old fails the signature's own age check.
        for (var i = 0; i < ControlReplayGuard.MaxRemembered / 2; i++)
        {
            Assert.True(guard.FirstTime($"fill-{i}"));
        }

        Assert.True(guard.FirstTime("v2;t=1;mac=a"));
    }

    [Fact]
    public void AFullGuard_RefusesNewMessages_UntilEntriesExpire()
    {
        var time = new FakeTimeProvider(DateTimeOffset.UnixEpoch);
        var guard = new ControlReplayGuard(time, TimeSpan.FromMinutes(5));
        for (var i = 0; i < ControlReplayGuard.MaxRemembered; i++)
        {
            Assert.True(guard.FirstTime($"m-{i}"));
        }

        Assert.False(guard.FirstTime("one-more"));
        time.Advance(TimeSpan.FromMinutes(6));
        Assert.True(guard.FirstTime("one-more"));
    }
}
