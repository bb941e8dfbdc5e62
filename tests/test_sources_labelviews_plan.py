# -*- test-case-name: tests.test_sources_labelviews_plan -*-
"""
Tests for what C{imapmig plan} (L{imapmig.commands.plan}) and C{imapmig verify}
(L{imapmig.commands.verify}) say of a Gmail-shaped source's label views: every
view left out listed with its message count and why, the archived mail
of All Mail bound for the archive folder, or, with the archive folder
off, counted as not migrated.  Against the fake server in Gmail's shape
without X-GM-EXT-1 (L{tests.test_sources_labelviews.GmailAccount}).
"""

from __future__ import annotations

import io
from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from imapmig.mail.folders import FolderRules
from imapmig.commands.plan import JobPlan, _writePlan, previewJob
from imapmig.commands.verify import VerifyReport, verifyJob
from tests.test_job import JOB
from tests.test_sources_labelviews import (
    ALL_MAIL,
    GMAIL_USER,
    IMPORTANT,
    STARRED,
    WITHOUT_EXTENSION,
    GmailAccount,
    _populate,
    idBody,
)


class LabelViewPlanTests(SynchronousTestCase):
    """
    C{imapmig plan} and C{imapmig verify} on a Gmail-shaped source without
    X-GM-EXT-1.
    """

    def account(self) -> GmailAccount:
        account = GmailAccount(self, WITHOUT_EXTENSION, withIds=True)
        _populate(account)
        return account

    def plan(self, account: GmailAccount, archiveFolder: str | None = "Archive") -> JobPlan:
        source = account.source(archiveFolder=archiveFolder)
        d = Deferred.fromCoroutine(
            previewJob(
                JOB,
                source,
                FolderRules(),
                account._destinationOpener(),
                account.harness.store,
            )
        )
        plan: JobPlan = account.call(d)
        account.call(source.close())
        return plan

    def verify(self, account: GmailAccount, archiveFolder: str | None = "Archive") -> VerifyReport:
        source = account.source(archiveFolder=archiveFolder)
        d = Deferred.fromCoroutine(
            verifyJob(
                JOB, source, FolderRules(), account._destinationOpener(), account.harness.store
            )
        )
        report: VerifyReport = account.call(d)
        account.call(source.close())
        return report

    def finish(self, account: GmailAccount) -> None:
        """
        Let every connection close, then check nothing is left.
        """
        account.harness.settle()
        account.harness.endpoint.pump()
        account.harness.finish()

    def text(self, plan: JobPlan) -> str:
        out = io.StringIO()
        _writePlan(plan, out)
        return out.getvalue()

    def test_planListsViewsLeftOut(self) -> None:
        """
        The plan lists Important and Starred as left out, each with its
        message count (EXAMINE) and why, and All Mail with only its
        archived message, bound for C{Archive}; the total counts the views
        left out.
        """
        account = self.account()
        plan = self.plan(account)
        rows = {f.folder: f for f in plan.folders}
        allMail = rows[ALL_MAIL]
        self.assertEqual(
            (allMail.messages, allMail.mailbox, allMail.how, allMail.toCopy),
            (1, "Archive", "archive", 1),
        )
        for view in (IMPORTANT, STARRED):
            self.assertEqual((rows[view].messages, rows[view].how), (1, "left out"))
        self.assertIn("\\Flagged flag is copied", rows[STARRED].why or "")
        self.assertEqual(plan.totals()["excluded_folders"], 2)
        self.assertIn(("Archive", None), plan.create)
        text = self.text(plan)
        self.assertIn(
            "left out [Gmail]/Starred: 1 message: a view of the flagged messages, whose"
            " \\Flagged flag is copied; a folder rule (include) naming it, or"
            " label_views: copy, copies it",
            text,
        )
        self.assertIn("left out [Gmail]/Important: 1 message: a view of the messages", text)
        self.assertIn("in 4 folders (2 left out)", text)
        folders: Any = plan.toJSON()["folders"]
        self.assertEqual(folders[-1]["why"], rows[STARRED].why)
        self.finish(account)

    def test_planListsSharedLeftOut(self) -> None:
        """
        A mailbox of the shared namespace, which the source leaves out,
        is listed too, with its message count and why.
        """
        account = GmailAccount(self, WITHOUT_EXTENSION + ("NAMESPACE",), withIds=True)
        _populate(account)
        account.mail.namespaceText = b'(("" "/")) NIL (("shared/" "/"))'
        account.mail.create(GMAIL_USER, "shared/team")
        account.mail.append(GMAIL_USER, "shared/team", [(idBody(n), (), None) for n in (9, 10)])
        plan = self.plan(account)
        [team] = [f for f in plan.folders if f.folder == "shared/team"]
        self.assertEqual((team.messages, team.mailbox, team.how), (2, None, "left out"))
        self.assertEqual(
            team.why, "in the shared namespace; a folder rule (include) naming it copies it"
        )
        self.assertIn("(3 left out)", self.text(plan))
        self.finish(account)

    def test_planNotMigrated(self) -> None:
        """
        With the archive folder off, the plan shows All Mail's archived
        message as not migrated, with why, and creates no mailbox for it.
        """
        account = self.account()
        plan = self.plan(account, None)
        [allMail] = [f for f in plan.folders if f.folder == ALL_MAIL]
        self.assertEqual(
            (allMail.messages, allMail.mailbox, allMail.how), (1, None, "not migrated")
        )
        self.assertEqual(plan.totals()["not_migrated"], 1)
        self.assertNotIn("Archive", [name for name, _ in plan.create])
        text = self.text(plan)
        self.assertIn(
            "not migrated [Gmail]/All Mail: 1 message: found only in [Gmail]/All Mail"
            " (archived mail, in no other folder copied) and archive_folder is off",
            text,
        )
        self.assertIn(", 1 not migrated;", text)
        self.finish(account)

    def test_verifyArchived(self) -> None:
        """
        After a run, verify compares C{Archive} with All Mail's archived
        mail, and finds no difference.
        """
        account = self.account()
        self.assertTrue(account.harness.run(account.job(account.source())))
        report = self.verify(account)
        self.assertEqual(report.differences, [])
        [archive] = [m for m in report.mailboxes if m.mailbox == "Archive"]
        self.assertEqual(
            (archive.folders, archive.sourceMessages, archive.matched), ((ALL_MAIL,), 1, 1)
        )
        self.finish(account)

    def test_verifyNotMigrated(self) -> None:
        """
        With the archive folder off, verify counts All Mail's archived
        message as a difference, C{not migrated}, with why.
        """
        account = self.account()
        account.harness.run(account.job(account.source(archiveFolder=None)))
        report = self.verify(account, None)
        [difference] = report.differences
        self.assertEqual(
            (difference.kind, difference.mailbox, difference.folder),
            ("not migrated", "-", ALL_MAIL),
        )
        self.assertIn("archive_folder is off", difference.detail)
        self.finish(account)
